// XDR of the NFSv3 procedures the snapshot copy uses (RFC 1813): what each call puts on the
// wire, and how its reply decodes, against byte layouts written out by hand from the RFC.
import t from 'tap';
import { Nfs3Client, type RpcTransport } from '../../../../src/nfs/client/nfs3.js';
import type { RpcCall } from '../../../../src/nfs/client/rpc.js';
import { XdrReader, XdrWriter } from '../../../../src/nfs/client/xdr.js';

/** A transport that records each call and answers with the reply `reply` builds. */
function rig(reply: (w: XdrWriter) => void): { client: Nfs3Client; calls: RpcCall[] } {
  const calls: RpcCall[] = [];
  const rpc: RpcTransport = {
    call: (c) => {
      calls.push(c);
      const w = new XdrWriter();
      reply(w);
      return Promise.resolve(new XdrReader(w.bytes()));
    },
  };
  return { client: new Nfs3Client(rpc, 'nas'), calls };
}

const FH = Buffer.from('0123456789ab');
const DIR = Buffer.from('dirhandle');

function fattr(w: XdrWriter, over: { type?: number; mode?: number; size?: number } = {}): XdrWriter {
  w.u32(over.type ?? 1)
    .u32(over.mode ?? 0o100644)
    .u32(2)
    .u32(1000)
    .u32(100);
  w.u64(over.size ?? 5)
    .u64(4096)
    .u32(8)
    .u32(1)
    .u64(77n)
    .u64(4242n);
  return w.u32(1700000000).u32(123).u32(1700000001).u32(456789).u32(1700000002).u32(999);
}

/** The argument bytes of the only call, as a reader. */
const args = (calls: RpcCall[]) => new XdrReader(calls[0]?.args ?? Buffer.alloc(0));

t.test('fattr3 keeps exact atime/mtime and rdev', async (t) => {
  const { client } = rig((w) => fattr(w.u32(0), { type: 4, mode: 0o2750 }));
  const a = await client.getattr(FH);
  t.same(a.atime, { sec: 1700000000, nsec: 123 });
  t.same(a.mtime, { sec: 1700000001, nsec: 456789 });
  t.same(a.rdev, { major: 8, minor: 1 });
  t.equal(a.type, 'char');
  t.equal(a.mode, 0o2750);
  t.equal(a.mtimeMs, 1700000001000);
});

t.test('READ encodes fh, offset, count and decodes data and eof', async (t) => {
  const { client, calls } = rig((w) => fattr(w.u32(0).bool(true)).u32(5).bool(true).opaque(Buffer.from('hello')));
  const r = await client.read(FH, 2 ** 33, 65536);
  t.equal(r.data.toString(), 'hello');
  t.equal(r.eof, true);
  t.equal(calls[0]?.proc, 6);
  const a = args(calls);
  t.same(a.opaque(), FH);
  t.equal(a.u64(), 2n ** 33n);
  t.equal(a.u32(), 65536);
  t.equal(a.remaining, 0);
});

t.test('READ whose count and data disagree is a malformed reply', async (t) => {
  const { client } = rig((w) => w.u32(0).bool(false).u32(4).bool(false).opaque(Buffer.from('hello')));
  await t.rejects(client.read(FH, 0, 8), /malformed READ reply/);
});

t.test('WRITE encodes stable_how and data, skips wcc_data, decodes count/committed/verf', async (t) => {
  const verf = Buffer.from('VERIFIER');
  const { client, calls } = rig((w) => {
    w.u32(0).bool(true).u64(1).u32(1).u32(2).u32(3).u32(4); // pre_op_attr: size, mtime, ctime
    fattr(w.bool(true));
    w.u32(3).u32(0).fixed(verf);
  });
  const r = await client.write(FH, 10, Buffer.from('abc'), 'unstable');
  t.same(r, { count: 3, committed: 'unstable', verf });
  t.equal(calls[0]?.proc, 7);
  const a = args(calls);
  t.same(a.opaque(), FH);
  t.equal(a.u64(), 10n);
  t.equal(a.u32(), 3);
  t.equal(a.u32(), 0, 'UNSTABLE');
  t.equal(a.opaque().toString(), 'abc');
  t.equal(a.remaining, 0);
});

t.test('CREATE is GUARDED with the full sattr3 (times SET_TO_CLIENT_TIME)', async (t) => {
  const { client, calls } = rig((w) => {
    w.u32(0).bool(true).opaque(FH);
    fattr(w.bool(true));
    w.bool(false).bool(false); // wcc_data without attributes
  });
  const r = await client.create(DIR, 'f', {
    mode: 0o640,
    uid: 7,
    gid: 8,
    size: 0,
    atime: { sec: 1, nsec: 2 },
    mtime: { sec: 3, nsec: 4 },
  });
  t.same(r.handle, FH);
  t.equal(r.attrs?.fileid, 4242n);
  t.equal(calls[0]?.proc, 8);
  const a = args(calls);
  t.same(a.opaque(), DIR);
  t.equal(a.string(), 'f');
  t.equal(a.u32(), 1, 'GUARDED');
  const got = [a.bool(), a.u32(), a.bool(), a.u32(), a.bool(), a.u32(), a.bool(), a.u64()];
  t.same(got, [true, 0o640, true, 7, true, 8, true, 0n]);
  t.same([a.u32(), a.u32(), a.u32()], [2, 1, 2], 'atime set to client time');
  t.same([a.u32(), a.u32(), a.u32()], [2, 3, 4], 'mtime set to client time');
  t.equal(a.remaining, 0);
});

t.test('SETATTR leaves what is not given unchanged', async (t) => {
  const { client, calls } = rig((w) => w.u32(0).bool(false).bool(false));
  await client.setattr(FH, { mtime: { sec: 9, nsec: 10 } });
  const a = args(calls);
  a.opaque();
  t.same([a.bool(), a.bool(), a.bool(), a.bool()], [false, false, false, false]);
  t.equal(a.u32(), 0, 'atime DONT_CHANGE');
  t.same([a.u32(), a.u32(), a.u32()], [2, 9, 10]);
  t.equal(a.bool(), false, 'no ctime guard');
  t.equal(a.remaining, 0);
});

t.test('SYMLINK puts sattr before the target; READLINK decodes the path', async (t) => {
  const s = rig((w) => w.u32(0).bool(false).bool(false).bool(false).bool(false));
  await s.client.symlink(DIR, 'l', '../x', { uid: 5 });
  const a = args(s.calls);
  t.same(a.opaque(), DIR);
  t.equal(a.string(), 'l');
  t.same([a.bool(), a.bool(), a.u32(), a.bool(), a.bool(), a.u32(), a.u32()], [false, true, 5, false, false, 0, 0]);
  t.equal(a.string(), '../x');
  t.equal(a.remaining, 0);
  t.equal(s.calls[0]?.proc, 10);

  const r = rig((w) => w.u32(0).bool(false).string('target/path'));
  t.equal(await r.client.readlink(FH), 'target/path');
  t.equal(r.calls[0]?.proc, 5);
});

t.test('LINK and MKNOD and COMMIT', async (t) => {
  const l = rig((w) => w.u32(0).bool(false).bool(false).bool(false));
  await l.client.link(FH, DIR, 'second');
  const a = args(l.calls);
  t.same([a.opaque(), a.opaque(), a.string()], [FH, DIR, 'second']);
  t.equal(l.calls[0]?.proc, 15);

  const m = rig((w) => w.u32(0).bool(false).bool(false).bool(false).bool(false));
  await m.client.mknod(DIR, 'dev', 'char', { mode: 0o600, rdev: { major: 1, minor: 3 } });
  const b = args(m.calls);
  t.same([b.opaque(), b.string(), b.u32()], [DIR, 'dev', 4]);
  t.same([b.bool(), b.u32(), b.bool(), b.bool(), b.bool(), b.u32(), b.u32()], [true, 0o600, false, false, false, 0, 0]);
  t.same([b.u32(), b.u32()], [1, 3]);
  t.equal(b.remaining, 0);

  const c = rig((w) => w.u32(0).bool(false).bool(false).fixed(Buffer.from('12345678')));
  t.equal((await c.client.commit(FH)).toString(), '12345678');
  t.equal(c.calls[0]?.proc, 21);
});

t.test('a failure status names the procedure', async (t) => {
  const { client } = rig((w) => w.u32(17));
  await t.rejects(client.create(DIR, 'f', {}), /CREATE/);
});
