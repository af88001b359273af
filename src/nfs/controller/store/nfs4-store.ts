// NfsStore over NFSv4: every operation is one or a few COMPOUNDs that start at the server's
// root (PUTROOTFH) and LOOKUP the share's path and the volume's path, so no handle outlives
// an operation (except while emptying a tree) and nothing is mounted. The share is the path a
// kernel client mounts with NFSv4 (e.g. ganesha's Pseudo path, the NAS's share path).
import type { Logger } from 'pino';
import { AlreadyExists, FailedPrecondition } from '../../../errors.js';
import {
  ACCESS4,
  BOUNDARY_ATTRS,
  type Attrs4,
  FSSTAT_ATTRS,
  type MinorVersion,
  NFS4ERR,
  Nfs4Client,
  type Op4,
  type ReaddirPage,
  type SetAttrs4,
  fsStatOf,
  isJunction,
  isNfs4Status,
  op,
} from '../../client/nfs4.js';
import { COPY_ATTRS, io } from '../../client/nfs4-io.js';
import { type Opener, openerOf } from '../../client/nfs4-open.js';
import { RpcConnection } from '../../client/rpc.js';
import { TreeCopy, slotsFor, type CopyStats } from '../copy/copy-tree.js';
import { copyAttrs4, nfs4ServerCopy, nfs4Sink, nfs4Source, nfs4UnpackSink } from '../copy/nfs4-copy.js';
import { unpackTar } from '../copy/tar-unpack.js';
import { ProtocolStore, type RenameSteps, attrsToChange, nullHealth } from './protocol-store.js';
import type {
  CopyTreeOptions,
  DirAttrs,
  FsStat,
  InspectOptions,
  NfsDirEntry,
  NfsStat,
  NfsStores,
  OpOptions,
  PathFacts,
  Permit,
  RawNfsStore,
  RmdirResult,
} from './store.js';
import { lastOf, pathSegments as segments } from './store.js';
import { admitted, boundaryError, gated } from './ownership.js';

/** What changing entries of a directory needs; a pseudo-filesystem node grants none of it. */
const CHANGE = ACCESS4.MODIFY | ACCESS4.EXTEND | ACCESS4.DELETE;

const DEFAULT_DIR_MODE = 0o755;

/** Numeric owner strings map to ids; a name (`user@domain`) has no id here: -1. */
const idOf = (s: string | undefined): number =>
  s !== undefined && /^\d+$/.test(s) ? Number(s) : s === 'root' || s?.startsWith('root@') ? 0 : -1;

const toStat = (a: Attrs4): NfsStat => ({
  type: a.type ?? 'file',
  mode: a.mode ?? 0,
  uid: idOf(a.owner),
  gid: idOf(a.group),
  ...(a.size !== undefined && { size: a.size }),
  ...(a.mtimeMs !== undefined && { mtimeMs: a.mtimeMs }),
  ...(a.ctimeMs !== undefined && { ctimeMs: a.ctimeMs }),
});

const setAttrs = (a: DirAttrs): SetAttrs4 => ({
  ...(a.mode !== undefined && { mode: a.mode }),
  ...(a.uid !== undefined && { owner: String(a.uid) }),
  ...(a.gid !== undefined && { group: String(a.gid) }),
});

const missing = (e: unknown) => isNfs4Status(e, NFS4ERR.NOENT);

const STATUS = {
  missing,
  notDir: (e: unknown) => isNfs4Status(e, NFS4ERR.NOTDIR),
  notEmpty: (e: unknown) => isNfs4Status(e, NFS4ERR.NOTEMPTY, NFS4ERR.EXIST),
  badCookie: (e: unknown) => isNfs4Status(e, NFS4ERR.BAD_COOKIE),
};

export class Nfs4Store extends ProtocolStore<Buffer> implements RawNfsStore {
  private readonly shareSegs: string[];

  constructor(
    private readonly c: Nfs4Client,
    server: string,
    share: string,
    private readonly log?: Logger,
  ) {
    const remove = async (dir: Buffer, name: string, path: string, signal: AbortSignal | undefined) => {
      await c.compound([op.putfh(dir), op.remove(name)], path, signal);
    };
    super(server, share, STATUS, {
      readdir: async (dir, cookie, verf, path, signal) =>
        (await c.compound([op.putfh(dir), op.readdir(cookie, verf)], path, signal))[1] as ReaddirPage,
      lookup: async (dir, name, path, signal) => {
        const [, , handle, a] = (await c.compound(
          [op.putfh(dir), op.lookup(name), op.getfh(), op.getattr(BOUNDARY_ATTRS)],
          path,
          signal,
        )) as [unknown, unknown, Buffer, Attrs4];
        return { handle, type: toStat(a).type, fsid: a.fsid ?? '', junction: isJunction(a) };
      },
      // REMOVE takes files and empty directories alike, and never follows a symlink.
      removeFile: remove,
      removeDir: remove,
    });
    this.shareSegs = share.split('/').filter(Boolean);
  }

  /** PUTROOTFH and LOOKUPs down to `segs` below the share. */
  private to(segs: string[]): Op4[] {
    return [op.putrootfh(), ...[...this.shareSegs, ...segs].map((s) => op.lookup(s))];
  }

  private run(ops: Op4[], segs: string[], o: OpOptions): Promise<unknown[]> {
    return this.c.compound(ops, this.where(segs), o.signal);
  }

  /** The share itself must exist: a missing one is the StorageClass's or PV's mistake. */
  private async shareProblem(e: unknown, o: OpOptions): Promise<never> {
    if (this.absent(e)) {
      try {
        await this.c.compound(this.to([]), this.share, o.signal);
      } catch (e2) {
        if (this.absent(e2)) {
          throw new FailedPrecondition(
            `NFS server ${this.server} has no directory ${this.share} in its NFSv4 namespace: ${(e2 as Error).message}`,
            { cause: e2 },
          );
        }
      }
    }
    throw e;
  }

  private async getattr(segs: string[], o: OpOptions): Promise<Attrs4> {
    const r = await this.run([...this.to(segs), op.getattr()], segs, o);
    return r[r.length - 1] as Attrs4;
  }

  /**
   * The share (its fsid, and whether ACCESS lets this client change its entries) and the steps
   * below it that exist, each with its type, fsid and whether a file system begins there.
   */
  async inspect(path: string, o: InspectOptions = {}): Promise<PathFacts> {
    const segs = segments(path, true);
    let r: unknown[];
    try {
      r = await this.run([...this.to([]), op.getattr(BOUNDARY_ATTRS), op.access(CHANGE), op.getfh()], [], o);
    } catch (e) {
      return this.shareProblem(e, o);
    }
    const [a, acc, root] = r.slice(-3) as [Attrs4, { granted: number }, Buffer];
    const facts: PathFacts = { share: { fsid: a.fsid ?? '', writable: (acc.granted & CHANGE) === CHANGE }, steps: [] };
    let fh = root;
    for (const [i, name] of segs.entries()) {
      let step: unknown[];
      try {
        step = await this.run(
          [op.putfh(fh), op.lookup(name), op.getattr(BOUNDARY_ATTRS), op.getfh()],
          segs.slice(0, i + 1),
          o,
        );
      } catch (e) {
        if (missing(e)) break;
        throw e;
      }
      const [sa, h] = step.slice(-2) as [Attrs4, Buffer];
      const type = sa.type ?? 'file';
      facts.steps.push({ name, type, fsid: sa.fsid ?? '', junction: isJunction(sa) });
      if (type !== 'dir') break;
      fh = h;
    }
    await this.walkBelow(facts, segs, fh, o);
    return facts;
  }

  /** An object on another file system than the permit's is a boundary: refused. */
  private sameFs(a: Attrs4, fsid: string, segs: string[]): void {
    if (a.fsid !== fsid) throw boundaryError(this.describe(segs));
  }

  async ensureDir(permit: Permit, attrs: DirAttrs, o: OpOptions = {}): Promise<NfsStat> {
    const { segs, fsid } = admitted(permit, 'create');
    try {
      for (let i = 1; i <= segs.length; i++) {
        const last = i === segs.length;
        const here = segs.slice(0, i);
        let a: Attrs4 | undefined;
        try {
          a = await this.getattr(here, o);
        } catch (e) {
          if (!missing(e)) throw e;
        }
        if (!a) {
          const create = last
            ? { ...setAttrs(attrs), mode: attrs.mode ?? DEFAULT_DIR_MODE }
            : { mode: DEFAULT_DIR_MODE };
          try {
            const r = await this.run(
              [...this.to(here.slice(0, -1)), op.mkdir(lastOf(here).name, create), op.getattr()],
              here,
              o,
            );
            a = r[r.length - 1] as Attrs4;
          } catch (e) {
            if (!isNfs4Status(e, NFS4ERR.EXIST)) throw e; // made by someone else meanwhile
            a = await this.getattr(here, o);
          }
        }
        if (a.type !== 'dir')
          throw new FailedPrecondition(`${this.server}:${this.where(here)} exists and is a ${a.type}, not a directory`);
        this.sameFs(a, fsid, here);
        if (last) {
          const st = toStat(a);
          const want = attrsToChange(st, attrs);
          if (Object.keys(want).length === 0) return st;
          const r = await this.run([...this.to(here), op.setattr(setAttrs(want)), op.getattr()], here, o);
          return toStat(r[r.length - 1] as Attrs4);
        }
      }
    } catch (e) {
      return this.shareProblem(e, o);
    }
    throw new Error('unreachable');
  }

  async stat(path: string, o: OpOptions = {}): Promise<NfsStat | null> {
    const segs = segments(path, true);
    try {
      return toStat(await this.getattr(segs, o));
    } catch (e) {
      if (segs.length && this.absent(e)) return null;
      return this.shareProblem(e, o);
    }
  }

  async list(path: string, o: OpOptions = {}): Promise<NfsDirEntry[]> {
    const segs = segments(path, true);
    try {
      const [fh] = (await this.run([...this.to(segs), op.getfh()], segs, o)).slice(-1) as [Buffer];
      return await this.tree.list(fh, segs, o);
    } catch (e) {
      this.notFound(e, segs);
    }
  }

  async removeTree(permit: Permit, o: OpOptions = {}): Promise<boolean> {
    const { segs, fsid } = admitted(permit, 'delete');
    const parentSegs = segs.slice(0, -1);
    const name = lastOf(segs).name;
    let parent: Buffer;
    let target: Buffer;
    let a: Attrs4;
    try {
      const r = await this.run(
        [...this.to(parentSegs), op.getfh(), op.lookup(name), op.getfh(), op.getattr(BOUNDARY_ATTRS)],
        segs,
        o,
      );
      [parent, , target, a] = r.slice(-4) as [Buffer, undefined, Buffer, Attrs4];
    } catch (e) {
      if (this.absent(e)) return false;
      throw e;
    }
    const looked = { handle: target, type: toStat(a).type, fsid: a.fsid ?? '', junction: isJunction(a) };
    await this.tree.removeTree(parent, name, looked, segs, { ...o, fsid });
    return true;
  }

  async removeDirIfEmpty(permit: Permit, o: OpOptions = {}): Promise<RmdirResult> {
    const { segs, fsid } = admitted(permit, 'rmdir');
    const name = lastOf(segs).name;
    try {
      const r = await this.run([...this.to(segs), op.getattr()], segs, o);
      const a = r[r.length - 1] as Attrs4;
      if (a.type !== 'dir') return 'not-empty';
      this.sameFs(a, fsid, segs);
      await this.run([...this.to(segs.slice(0, -1)), op.remove(name)], segs, o);
      return 'removed';
    } catch (e) {
      return this.rmdirOutcome(e);
    }
  }

  protected renameSteps(
    fs: string[],
    ts: string[],
    o: OpOptions & { fsid: string },
    run: <F, T>(steps: RenameSteps<F, T>) => Promise<void>,
  ): Promise<void> {
    return run({
      source: () => this.getattr(fs, o),
      parents: async () => {
        if (ts.length > 1) await this.ensureParents(ts.slice(0, -1), o);
      },
      probe: () => this.getattr(ts, o),
      rename: async () => {
        await this.c.compound(
          [
            ...this.to(fs.slice(0, -1)),
            op.savefh(),
            ...this.to(ts.slice(0, -1)),
            op.rename(lastOf(fs).name, lastOf(ts).name),
          ],
          `${this.where(fs)} -> ${this.where(ts)}`,
          o.signal,
        );
      },
    });
  }

  private async ensureParents(segs: string[], o: OpOptions): Promise<void> {
    for (let i = 1; i <= segs.length; i++) {
      const here = segs.slice(0, i);
      try {
        await this.run(
          [...this.to(here.slice(0, -1)), op.mkdir(lastOf(here).name, { mode: DEFAULT_DIR_MODE })],
          here,
          o,
        );
      } catch (e) {
        if (!isNfs4Status(e, NFS4ERR.EXIST)) throw e;
      }
    }
  }

  /** What opens the files a copy writes, for the minor version in use. */
  private opener(o: OpOptions): Promise<Opener> {
    return openerOf(this.c, this.log, o.signal);
  }

  /** The handle and copy attributes of an existing path. */
  private async source(segs: string[], o: OpOptions): Promise<[Buffer, Attrs4]> {
    try {
      const r = await this.run([...this.to(segs), op.getfh(), op.getattr(COPY_ATTRS)], segs, o);
      return r.slice(-2) as [Buffer, Attrs4];
    } catch (e) {
      this.notFound(e, segs);
    }
  }

  /** The target of a copy or unpack, made here (CREATE: never into something): its handle. */
  private async makeTarget(to: string[], fsid: string, o: OpOptions): Promise<Buffer> {
    const parent = to.slice(0, -1);
    if (parent.length) {
      await this.ensureParents(parent, o);
      const pa = await this.getattr(parent, o);
      if (pa.type !== 'dir') {
        throw new FailedPrecondition(
          `${this.server}:${this.where(parent)} exists and is a ${pa.type}, not a directory`,
        );
      }
      this.sameFs(pa, fsid, parent);
    }
    try {
      const made = await this.run([...this.to(parent), op.mkdir(lastOf(to).name, { mode: 0o700 }), op.getfh()], to, o);
      return made[made.length - 1] as Buffer;
    } catch (e) {
      if (isNfs4Status(e, NFS4ERR.EXIST)) throw new AlreadyExists(`${this.describe(to)} already exists`);
      throw e;
    }
  }

  private at(base: string[]): (p: string) => string {
    return (p) => this.where(p ? [...base, ...p.split('/')] : base);
  }

  /** The tree at the permit's path copied to its target. */
  async copyTree(permit: Permit, o: CopyTreeOptions = {}): Promise<CopyStats> {
    const { segs, to, fsid } = admitted(permit, 'copy');
    const opener = await this.opener(o);
    const [srcFh, srcAttrs] = await this.source(segs, o);
    const fh = await this.makeTarget(to, fsid, o);
    const copy = new TreeCopy(
      nfs4Source(this.c, this.at(segs)),
      nfs4Sink(this.c, opener, this.at(to)),
      {
        ...o,
        fsid,
        slots: slotsFor(this.server),
        describe: (p) => `${this.server}:${this.at(segs)(p)}`,
      },
      nfs4ServerCopy(this.c, this.at(to), this.log),
    );
    return copy.run(srcFh, copyAttrs4(srcAttrs, this.where(segs)), { fh }, '');
  }

  /** The archive file at the permit's path unpacked into its target. */
  async unpackArchive(permit: Permit, o: CopyTreeOptions = {}): Promise<CopyStats> {
    const { segs, to, fsid } = admitted(permit, 'unpack');
    const opener = await this.opener(o);
    const [srcFh, a] = await this.source(segs, o);
    if (a.type !== 'file' || a.fsid !== fsid || isJunction(a)) {
      throw new FailedPrecondition(`${this.describe(segs)} is not an archive file on the share's file system`);
    }
    const fh = await this.makeTarget(to, fsid, o);
    const read = async (offset: number, count: number) =>
      (await this.c.compound([op.putfh(srcFh), io.read(offset, count)], this.where(segs), o.signal))[1] as {
        eof: boolean;
        data: Buffer;
      };
    return unpackTar(
      read,
      nfs4UnpackSink(this.c, opener, this.at(to)),
      { fh },
      {
        ...o,
        slots: slotsFor(this.server),
        archive: this.describe(segs),
      },
    );
  }

  async statfs(o: OpOptions = {}): Promise<FsStat> {
    const r = await this.run([...this.to([]), op.getattr(FSSTAT_ATTRS)], [], o);
    return fsStatOf(r[r.length - 1] as Attrs4);
  }
}

export interface Nfs4StoresOptions {
  timeoutMs: number;
  /** Instead of 2049 (test servers). */
  nfsPort?: number | undefined;
  /** 4.2, then 4.1, then 4.0 when unset. */
  minor?: MinorVersion | undefined;
  privilegedPort?: boolean | undefined;
  log?: Logger | undefined;
}

/** One NFSv4 client per server; shares are only paths in its namespace. */
export function createNfs4Stores(opts: Nfs4StoresOptions): NfsStores {
  const clients = new Map<string, { conn: RpcConnection; client: Nfs4Client }>();
  const client = (server: string) => {
    let c = clients.get(server);
    if (!c) {
      const conn = new RpcConnection({
        host: server,
        port: opts.nfsPort ?? 2049,
        label: 'NFSv4',
        timeoutMs: opts.timeoutMs,
        privilegedPort: opts.privilegedPort,
        log: opts.log,
      });
      c = { conn, client: new Nfs4Client(conn, { server, minor: opts.minor, log: opts.log }) };
      clients.set(server, c);
    }
    return c.client;
  };
  return {
    open: (server, share) => gated(new Nfs4Store(client(server), server, share, opts.log)),
    ping: async (signal) => {
      await Promise.all([...clients.values()].map((c) => c.client.null(signal)));
    },
    health: async (signal) =>
      Promise.all([...clients.entries()].map(([server, c]) => nullHealth(server, () => c.client.null(signal)))),
    servers: () => [...clients.keys()],
    close: async () => {
      for (const c of clients.values()) c.conn.close();
      clients.clear();
    },
  };
}
