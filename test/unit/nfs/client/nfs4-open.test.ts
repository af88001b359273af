// NFSv4.0 OPEN state (Opener40) against a model of RFC 7530's rules, with generated schedules:
// files opened and closed in parallel, replies that fail or never come, and server restarts that
// forget every client id. In every schedule the server must never see a wrong seqid from a
// confirmed owner or two seqid operations of one owner at once, must get every new owner
// confirmed before use and no NFSv4.1 bits, and a file whose calls all succeeded must open
// and close.
import t from 'tap';
import fc from 'fast-check';
import { NFS4ERR, Nfs4StatusError, type Op4 } from '../../../../src/nfs/client/nfs4.js';
import { Opener40 } from '../../../../src/nfs/client/nfs4-open.js';
import { XdrReader, XdrWriter } from '../../../../src/nfs/client/xdr.js';

/**
 * What happens to a call: answered; refused before anything is done (a seqid not consumed,
 * RFC 7530 §9.1.7's NFS4ERR_RESOURCE); done, but answered with an error; done, reply lost; or
 * the server restarts first and forgets every client.
 */
type Fault = 'none' | 'refused' | 'error' | 'lost' | 'restart';

interface OwnerState {
  confirmed: boolean;
  expect: number;
  busy: boolean;
}

/** A server holding NFSv4.0 client and open-owner state; `fault(n)` decides the n-th call's fate. */
function server40(fault: (n: number) => Fault) {
  const violations: string[] = [];
  let boot = 1;
  let calls = 0;
  const clients = new Map<bigint, { confirmed: boolean; verf: Buffer }>();
  const owners = new Map<string, OwnerState>();
  const stateOwner = new Map<string, string>();
  let nextId = 1n;
  let nextState = 1;
  const argsOf = (x: Op4) => {
    const w = new XdrWriter();
    x.args?.(w);
    return new XdrReader(w.bytes());
  };
  const stateid = (seq: number, other: number) => {
    const b = Buffer.alloc(16);
    b.writeUInt32BE(seq >>> 0, 0);
    b.writeUInt32BE(other, 12);
    return b;
  };
  /** A seqid operation of `key`: checked, then one tick of "in flight", then advanced. */
  const seqOp = async (key: string, seqid: number, what: string, needConfirmed: boolean) => {
    const s = owners.get(key);
    if (!s) throw new Error(`${what}: unknown owner ${key}`);
    if (s.busy) violations.push(`${what}: owner ${key} already has an operation in flight`);
    if (needConfirmed && !s.confirmed) violations.push(`${what}: owner ${key} used before OPEN_CONFIRM`);
    if (seqid !== s.expect) {
      violations.push(`${what}: owner ${key} sent seqid ${seqid}, the server expected ${s.expect}`);
      throw new Nfs4StatusError(NFS4ERR.BAD_SEQID, what, 'x');
    }
    s.busy = true;
    await new Promise((r) => setImmediate(r));
    s.busy = false;
    s.expect = (s.expect + 1) >>> 0;
  };
  const compound = async (ops: Op4[]): Promise<unknown[]> => {
    const n = calls++;
    const f = fault(n);
    if (f === 'refused') throw new Nfs4StatusError(10018 /* NFS4ERR_RESOURCE */, ops.at(-1)?.name ?? '?', 'injected');
    if (f === 'restart') {
      boot++;
      clients.clear();
      owners.clear();
      stateOwner.clear();
    }
    const out: unknown[] = [];
    for (const x of ops) {
      const r = argsOf(x);
      switch (x.name) {
        case 'PUTFH':
          r.opaque();
          out.push(undefined);
          break;
        case 'GETFH':
          out.push(Buffer.from(`fh-${boot}-${nextState}`));
          break;
        case 'SETCLIENTID': {
          r.fixed(8);
          r.opaque();
          if (r.u32() !== 0x40000000 || r.string() !== 'tcp') violations.push('SETCLIENTID: callback not encoded');
          const id = nextId++;
          const verf = Buffer.alloc(8, Number(id));
          clients.set(id, { confirmed: false, verf });
          out.push({ clientid: id, confirm: verf });
          break;
        }
        case 'SETCLIENTID_CONFIRM': {
          const id = r.u64();
          const c = clients.get(id);
          if (!c) throw new Nfs4StatusError(NFS4ERR.STALE_CLIENTID, x.name, 'x');
          if (!c.verf.equals(r.fixed(8))) violations.push('SETCLIENTID_CONFIRM: wrong verifier');
          c.confirmed = true;
          out.push(undefined);
          break;
        }
        case 'OPEN': {
          const seqid = r.u32();
          const access = r.u32();
          if (access !== 2) violations.push(`OPEN: share_access ${access.toString(16)} is not NFSv4.0's WRITE`);
          r.u32();
          const id = r.u64();
          const c = clients.get(id);
          if (!c?.confirmed) throw new Nfs4StatusError(NFS4ERR.STALE_CLIENTID, x.name, 'x');
          const key = `${id}/${r.opaque().toString()}`;
          let s = owners.get(key);
          // RFC 7530 §9.1.5: a new (or never confirmed) owner takes whatever seqid it sends.
          if (!s?.confirmed) owners.set(key, (s = { confirmed: false, expect: seqid, busy: s?.busy ?? false }));
          await seqOp(key, seqid, 'OPEN', false);
          const other = nextState++;
          stateOwner.set(String(other), key);
          out.push({ stateid: stateid(1, other), confirm: !s.confirmed, delegation: undefined });
          break;
        }
        case 'OPEN_CONFIRM': {
          const sid = r.fixed(16);
          const key = stateOwner.get(String(sid.readUInt32BE(12)));
          if (!key) throw new Nfs4StatusError(10025 /* NFS4ERR_BAD_STATEID */, x.name, 'x');
          await seqOp(key, r.u32(), 'OPEN_CONFIRM', false);
          const s = owners.get(key);
          if (s) s.confirmed = true;
          out.push(stateid(2, sid.readUInt32BE(12)));
          break;
        }
        case 'CLOSE': {
          const seqid = r.u32();
          const sid = r.fixed(16);
          const key = stateOwner.get(String(sid.readUInt32BE(12)));
          if (!key) throw new Nfs4StatusError(10025 /* NFS4ERR_BAD_STATEID */, x.name, 'x');
          await seqOp(key, seqid, 'CLOSE', true);
          stateOwner.delete(String(sid.readUInt32BE(12)));
          out.push(sid);
          break;
        }
        default:
          throw new Error(`unexpected ${x.name}`);
      }
    }
    if (f === 'error') throw new Nfs4StatusError(NFS4ERR.IO, ops.at(-1)?.name ?? '?', 'injected');
    if (f === 'lost') throw new Error('injected: the reply never came');
    return out;
  };
  return { compound, violations, opens: () => stateOwner.size };
}

t.test('a confirmed owner is reused with the next seqid; a new one is confirmed first', async (t) => {
  const s = server40(() => 'none');
  const o = new Opener40(s.compound);
  const dir = Buffer.from('dir');
  for (let i = 0; i < 3; i++) {
    const f = await o.create(dir, `f${i}`, {}, 'test');
    await o.close(f.fh, f.stateid, 'test');
  }
  t.equal(o.ownersMade, 1, 'one owner for files opened one after another');
  const open = await Promise.all([0, 1, 2, 3].map((i) => o.create(dir, `p${i}`, {}, 'test')));
  t.equal(o.ownersMade, 4, 'files open at once each hold an owner');
  await Promise.all(open.map((f) => o.close(f.fh, f.stateid, 'test')));
  t.same(s.violations, []);
  t.equal(s.opens(), 0, 'everything opened was closed');
});

t.test('a server restart (stale client id) sets up a new client and the OPEN goes again', async (t) => {
  let restarted = false;
  const s = server40(() => 'none');
  const o = new Opener40(async (ops) => {
    if (!restarted && ops.some((x) => x.name === 'OPEN')) {
      restarted = true;
      // What a restarted server says to a client id it never gave: STALE_CLIENTID.
      throw new Nfs4StatusError(NFS4ERR.STALE_CLIENTID, 'OPEN', 'x');
    }
    return s.compound(ops);
  });
  const f = await o.create(Buffer.from('d'), 'f', {}, 'test');
  await o.close(f.fh, f.stateid, 'test');
  t.same(s.violations, []);
});

t.test('generated schedules of parallel opens, failures, lost replies and restarts', async (t) => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.constantFrom<Fault>('none', 'none', 'none', 'refused', 'error', 'lost', 'restart'), {
        maxLength: 60,
      }),
      fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 6 }),
      async (faults, waves) => {
        const s = server40((n) => faults[n] ?? 'none');
        const o = new Opener40(s.compound);
        let name = 0;
        for (const width of waves) {
          await Promise.all(
            Array.from({ length: width }, async () => {
              let f;
              try {
                f = await o.create(Buffer.from('d'), `f${name++}`, {}, 'test');
              } catch {
                return;
              }
              await o.close(f.fh, f.stateid, 'test').catch(() => undefined);
            }),
          );
        }
        if (s.violations.length) throw new Error(s.violations.join('; '));
        // With no fault at all every file opened and closed: nothing is left open.
        if (faults.every((f) => f === 'none') && s.opens() !== 0) throw new Error(`${s.opens()} left open`);
      },
    ),
    { numRuns: 300 },
  );
  t.pass('no schedule made the client break NFSv4.0 sequencing');
});
