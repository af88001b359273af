// Opening the files a copy writes, in each minor version's terms.
//
// NFSv4.1 and 4.2 (RFC 8881 §18.16): an OPEN names the client id EXCHANGE_ID gave and one owner
// string; seqids are unused because the session's slots order every request.
//
// NFSv4.0 (RFC 7530 §9.1): the client id comes from SETCLIENTID and SETCLIENTID_CONFIRM, and every
// OPEN, OPEN_CONFIRM and CLOSE of one open-owner carries that owner's next sequence id, so one
// owner's operations must never overlap, and a new owner's first OPEN must be confirmed. Each
// file being written here holds an owner of its own from OPEN to CLOSE, so its three
// seqid operations run one after another. An owner goes back to the pool only after replies that
// advanced its seqid as this client counted. After any failure or lost reply it is dropped, because
// a new owner name costs one OPEN_CONFIRM and a guessed seqid can cost a refused CLOSE. A client id
// the server no longer knows (NFS4ERR_STALE_CLIENTID after a restart, NFS4ERR_EXPIRED after an idle
// lease) is set up again, and the OPEN is sent once more. An OPEN that failed created nothing.
import crypto from 'node:crypto';
import os from 'node:os';
import type { Logger } from 'pino';
import { type Nfs4Client, NFS4ERR, type SetAttrs4, isNfs4Status, op } from './nfs4.js';
import { type OpenOwner, type Stateid, io } from './nfs4-io.js';

export interface Opener {
  /** OPEN(CREATE, GUARDED) of `name` in `dir` for writing: the new file's handle and open stateid. */
  create(dir: Buffer, name: string, attrs: SetAttrs4, what: string, signal?: AbortSignal): Promise<Open4>;
  /** CLOSE of what `create` opened. Sent without a signal, so a cancelled copy still closes what it opened. */
  close(file: Buffer, stateid: Stateid, what: string): Promise<void>;
}

export interface Open4 {
  fh: Buffer;
  stateid: Stateid;
}

type Compound = Nfs4Client['compound'];

async function returnDelegation(c: Compound, fh: Buffer, deleg: Stateid | undefined, what: string) {
  if (deleg) await c([op.putfh(fh), io.delegreturn(deleg)], what);
}

/** The session opener: one owner for every OPEN, the client id of the session in use. */
function sessionOpener(c: Nfs4Client, owner: () => Promise<OpenOwner>): Opener {
  const run: Compound = (...a) => c.compound(...a);
  return {
    async create(dir, name, attrs, what, signal) {
      const r = await run([op.putfh(dir), io.create(await owner(), name, attrs), op.getfh()], what, signal);
      const opened = r[1] as { stateid: Stateid; delegation: Stateid | undefined };
      const fh = r[2] as Buffer;
      await returnDelegation(run, fh, opened.delegation, what);
      return { fh, stateid: opened.stateid };
    },
    async close(file, stateid, what) {
      await run([op.putfh(file), io.close(stateid)], what);
    },
  };
}

interface Owner40 {
  name: Buffer;
  /** The seqid the next OPEN, OPEN_CONFIRM or CLOSE of this owner carries. */
  seqid: number;
  /** The client id this owner was made under: owners die with it. */
  clientid: bigint;
}

/** RFC 7530 §9.1.7: the seqids wrap from 2^32-1 to 0. */
const next = (seqid: number) => (seqid + 1) >>> 0;

/** The state NFSv4.0 OPENs need: a confirmed client id and a pool of open-owners. */
export class Opener40 implements Opener {
  private clientid: Promise<bigint> | undefined;
  private readonly idle: Owner40[] = [];
  /** Open files by their stateid's `other` field: the owner the CLOSE must use. */
  private readonly opened = new Map<string, Owner40>();
  private made = 0;
  private readonly id = Buffer.from(
    `pve-nfs-csi/${os.hostname()}/${process.pid}/${crypto.randomBytes(4).toString('hex')}`,
  );
  private readonly verifier = crypto.randomBytes(8);

  constructor(
    private readonly run: Compound,
    private readonly log?: Logger,
  ) {}

  /** Owners made so far (tests: reuse is visible). */
  get ownersMade(): number {
    return this.made;
  }

  private establish(signal?: AbortSignal): Promise<bigint> {
    if (!this.clientid) {
      const p = (async () => {
        const [set] = (await this.run([io.setClientId(this.verifier, this.id)], 'to establish a client', signal)) as [
          { clientid: bigint; confirm: Buffer },
        ];
        await this.run([io.setClientIdConfirm(set.clientid, set.confirm)], 'to confirm a client', signal);
        return set.clientid;
      })();
      this.clientid = p;
      p.catch(() => {
        if (this.clientid === p) this.clientid = undefined;
      });
    }
    return this.clientid;
  }

  private async owner(signal?: AbortSignal): Promise<Owner40> {
    const clientid = await this.establish(signal);
    for (let o = this.idle.pop(); o; o = this.idle.pop()) if (o.clientid === clientid) return o;
    this.made++;
    return { name: Buffer.from(`open-${this.made}`), seqid: 0, clientid };
  }

  async create(dir: Buffer, name: string, attrs: SetAttrs4, what: string, signal?: AbortSignal): Promise<Open4> {
    for (let attempt = 1; ; attempt++) {
      const o = await this.owner(signal);
      try {
        return await this.openWith(o, dir, name, attrs, what, signal);
      } catch (e) {
        if (attempt === 1 && isNfs4Status(e, NFS4ERR.STALE_CLIENTID, NFS4ERR.EXPIRED)) {
          this.log?.debug({ err: (e as Error).message }, 'NFSv4.0 client id lost; setting up a new one');
          this.forget(o.clientid);
          continue;
        }
        throw e;
      }
    }
  }

  private async openWith(o: Owner40, dir: Buffer, name: string, attrs: SetAttrs4, what: string, signal?: AbortSignal) {
    const r = await this.run(
      [op.putfh(dir), io.create({ clientid: o.clientid, owner: o.name }, name, attrs, o), op.getfh()],
      what,
      signal,
    );
    o.seqid = next(o.seqid);
    const opened = r[1] as { stateid: Stateid; confirm: boolean; delegation: Stateid | undefined };
    const fh = r[2] as Buffer;
    let stateid = opened.stateid;
    if (opened.confirm) {
      // Without a signal: an OPEN left unconfirmed would hold the name's share state until the lease ends.
      stateid = (await this.run([op.putfh(fh), io.openConfirm(stateid, o)], what))[1] as Stateid;
      o.seqid = next(o.seqid);
    }
    await returnDelegation(this.run, fh, opened.delegation, what);
    this.opened.set(stateid.subarray(4).toString('hex'), o);
    return { fh, stateid };
  }

  async close(file: Buffer, stateid: Stateid, what: string): Promise<void> {
    const key = stateid.subarray(4).toString('hex');
    const o = this.opened.get(key);
    if (!o) return;
    this.opened.delete(key);
    await this.run([op.putfh(file), io.close(stateid, o)], what);
    o.seqid = next(o.seqid);
    this.idle.push(o);
  }

  /** A client id the server no longer knows: it and its owners go. */
  private forget(clientid: bigint): void {
    void this.clientid?.then(
      (cur) => {
        if (cur === clientid) this.clientid = undefined;
      },
      () => undefined,
    );
    for (let i = this.idle.length - 1; i >= 0; i--) if (this.idle[i]?.clientid === clientid) this.idle.splice(i, 1);
  }
}

const openers = new WeakMap<Nfs4Client, Opener>();

/** The opener for this client's negotiated minor version, one per client. */
export async function openerOf(c: Nfs4Client, log?: Logger, signal?: AbortSignal): Promise<Opener> {
  let o = openers.get(c);
  if (o) return o;
  const owner = await c.openOwner(signal);
  o =
    owner === null
      ? new Opener40((...a) => c.compound(...a), log)
      : sessionOpener(c, async () => (await c.openOwner()) ?? owner);
  openers.set(c, o);
  return o;
}
