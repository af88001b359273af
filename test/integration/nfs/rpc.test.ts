// The RPC transport against an in-process fake server: record marking across fragments and
// TCP chunks, XID multiplexing with out-of-order replies, deadlines, drops and reconnects.
import { present } from '../../helpers/present.js';
import t from 'tap';
import net from 'node:net';
import { RpcConnection } from '../../../src/nfs/client/rpc.js';
import { NFS3ERR, NfsStatusError } from '../../../src/nfs/client/status.js';
import { XdrReader, XdrWriter } from '../../../src/nfs/client/xdr.js';
import { outcomeText as kindOf, outcomeTextSync as kindOfSync } from '../../helpers/outcome.js';

interface Call {
  xid: number;
  prog: number;
  vers: number;
  proc: number;
  uid: number;
  gid: number;
  args: Buffer;
  sock: net.Socket;
}
type Handler = (c: Call) => void;

function frameReply(xid: number, body: (w: XdrWriter) => void): Buffer {
  const w = new XdrWriter().u32(xid).u32(1);
  body(w);
  const msg = w.bytes();
  // Two fragments, to exercise reassembly.
  const cut = Math.floor(msg.length / 2);
  const h1 = Buffer.alloc(4);
  h1.writeUInt32BE(cut);
  const h2 = Buffer.alloc(4);
  h2.writeUInt32BE((0x80000000 | (msg.length - cut)) >>> 0);
  return Buffer.concat([h1, msg.subarray(0, cut), h2, msg.subarray(cut)]);
}

const success = (xid: number, results: Buffer) => frameReply(xid, (w) => w.u32(0).u32(0).u32(0).u32(0).fixed(results));

/** Writes a buffer in awkward small chunks. */
function dribble(sock: net.Socket, b: Buffer) {
  for (let i = 0; i < b.length; i += 3) sock.write(b.subarray(i, i + 3));
}

async function fakeServer(handler: Handler) {
  const sockets = new Set<net.Socket>();
  let connections = 0;
  const srv = net.createServer((sock) => {
    connections++;
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => {});
    let rx = Buffer.alloc(0);
    sock.on('data', (d) => {
      rx = Buffer.concat([rx, d]);
      while (rx.length >= 4) {
        const len = rx.readUInt32BE(0) & 0x7fffffff;
        if (rx.length < 4 + len) return;
        const r = new XdrReader(rx.subarray(4, 4 + len));
        rx = rx.subarray(4 + len);
        const xid = r.u32();
        r.u32();
        r.u32();
        const prog = r.u32();
        const vers = r.u32();
        const proc = r.u32();
        t.equal(r.u32(), 1, 'AUTH_SYS credential');
        const cred = new XdrReader(r.opaque());
        cred.u32();
        cred.string();
        const uid = cred.u32();
        const gid = cred.u32();
        r.u32();
        r.opaque();
        handler({ xid, prog, vers, proc, uid, gid, args: r.fixed(r.remaining), sock });
      }
    });
  });
  await new Promise<void>((res) => srv.listen(0, '127.0.0.1', res));
  const port = (srv.address() as net.AddressInfo).port;
  return {
    port,
    get connections() {
      return connections;
    },
    dropAll: () => sockets.forEach((s) => s.destroy()),
    close: () =>
      new Promise<void>((res) => {
        sockets.forEach((s) => s.destroy());
        srv.close(() => res());
      }),
  };
}

const echoCall = (conn: RpcConnection, n: number, timeoutMs?: number, signal?: AbortSignal) =>
  conn
    .call({ prog: 100003, vers: 3, proc: 1, name: 'GETATTR', args: new XdrWriter().u32(n).bytes(), timeoutMs, signal })
    .then((r) => r.u32());

t.test('concurrent calls are multiplexed by XID; replies arrive out of order in pieces', async (t) => {
  const held: Call[] = [];
  const srv = await fakeServer((c) => {
    t.equal(c.uid, 0);
    t.equal(c.gid, 0);
    held.push(c);
    if (held.length === 20) {
      for (const h of held.reverse())
        dribble(h.sock, success(h.xid, new XdrWriter().u32(new XdrReader(h.args).u32() * 10).bytes()));
    }
  });
  t.teardown(srv.close);
  const conn = new RpcConnection({ host: '127.0.0.1', port: srv.port, label: 'NFS', timeoutMs: 2000 });
  t.teardown(() => conn.close());
  const results = await Promise.all(Array.from({ length: 20 }, (_, i) => echoCall(conn, i)));
  t.same(
    results,
    Array.from({ length: 20 }, (_, i) => i * 10),
  );
  t.equal(srv.connections, 1, 'one connection for all calls');
});

t.test('a server that never answers yields Unavailable within the deadline, then reconnects', async (t) => {
  let silent = true;
  const srv = await fakeServer((c) => {
    if (!silent) c.sock.write(success(c.xid, new XdrWriter().u32(1).bytes()));
  });
  t.teardown(srv.close);
  const conn = new RpcConnection({ host: '127.0.0.1', port: srv.port, label: 'NFS', timeoutMs: 300 });
  t.teardown(() => conn.close());
  const t0 = Date.now();
  t.match(
    await kindOf(echoCall(conn, 1)),
    /^Unavailable: NFS server 127\.0\.0\.1:\d+ did not answer GETATTR within 300 ms/,
  );
  const took = Date.now() - t0;
  t.ok(took >= 290 && took < 1500, `failed after ${took} ms`);
  silent = false;
  t.equal(await echoCall(conn, 1), 1);
  t.equal(srv.connections, 2, 'the silent connection was abandoned for a new one');
});

t.test('connection refused is Unavailable at once', async (t) => {
  const srv = await fakeServer(() => {});
  const port = srv.port;
  await srv.close();
  const conn = new RpcConnection({ host: '127.0.0.1', port, label: 'MOUNT', timeoutMs: 5000 });
  const t0 = Date.now();
  t.match(await kindOf(echoCall(conn, 1)), /^Unavailable: cannot reach MOUNT server 127\.0\.0\.1:\d+: .*ECONNREFUSED/);
  t.ok(Date.now() - t0 < 1000);
  conn.close();
});

t.test('a drop under a call is retried once on a new connection', async (t) => {
  let n = 0;
  const srv = await fakeServer((c) => {
    if (n++ === 0) return c.sock.destroy();
    c.sock.write(success(c.xid, new XdrWriter().u32(42).bytes()));
  });
  t.teardown(srv.close);
  const conn = new RpcConnection({ host: '127.0.0.1', port: srv.port, label: 'NFS', timeoutMs: 2000 });
  t.teardown(() => conn.close());
  t.equal(await echoCall(conn, 0), 42);
  t.equal(srv.connections, 2);

  srv.dropAll(); // the server closes an idle connection
  await new Promise((r) => setTimeout(r, 50));
  t.equal(await echoCall(conn, 0), 42, 'the next call reconnects');
  t.equal(srv.connections, 3);
});

t.test('two drops in a row surface as Unavailable', async (t) => {
  const srv = await fakeServer((c) => c.sock.destroy());
  t.teardown(srv.close);
  const conn = new RpcConnection({ host: '127.0.0.1', port: srv.port, label: 'NFS', timeoutMs: 2000 });
  t.teardown(() => conn.close());
  t.match(await kindOf(echoCall(conn, 0)), /^Unavailable: NFS server .*connection closed by server/);
});

t.test('RPC-level rejections are typed and explained', async (t) => {
  const srv = await fakeServer((c) => {
    if (c.proc === 1) c.sock.write(frameReply(c.xid, (w) => w.u32(0).u32(0).u32(0).u32(1))); // PROG_UNAVAIL
    if (c.proc === 2) c.sock.write(frameReply(c.xid, (w) => w.u32(1).u32(1).u32(5))); // AUTH_ERROR, AUTH_TOOWEAK
    if (c.proc === 3) c.sock.write(frameReply(c.xid, (w) => w.u32(0).u32(0).u32(0).u32(2).u32(4).u32(4))); // PROG_MISMATCH
  });
  t.teardown(srv.close);
  const conn = new RpcConnection({ host: '127.0.0.1', port: srv.port, label: 'NFS', timeoutMs: 2000 });
  t.teardown(() => conn.close());
  const call = (proc: number) => kindOf(conn.call({ prog: 100003, vers: 3, proc, name: 'X' }));
  t.match(await call(1), /^FailedPrecondition: .*PROG_UNAVAIL/);
  t.match(await call(2), /^FailedPrecondition: .*AUTH_SYS.*non-privileged ports/);
  t.match(await call(3), /^FailedPrecondition: .*versions 4\.\.4/);
});

t.test('a cancelled call rejects at once and a late reply is ignored', async (t) => {
  const held: Call[] = [];
  const srv = await fakeServer((c) => held.push(c));
  t.teardown(srv.close);
  const conn = new RpcConnection({ host: '127.0.0.1', port: srv.port, label: 'NFS', timeoutMs: 5000 });
  t.teardown(() => conn.close());
  const ac = new AbortController();
  const p = kindOf(echoCall(conn, 1, undefined, ac.signal));
  await new Promise((r) => setTimeout(r, 30));
  ac.abort();
  t.match(await p, /^DeadlineExceeded/);
  const first = present(held[0], 'the held call');
  first.sock.write(success(first.xid, new XdrWriter().u32(9).bytes()));
  held.length = 0;
  const q = echoCall(conn, 2);
  await new Promise((r) => setTimeout(r, 30));
  const second = present(held[0], 'the second held call');
  second.sock.write(success(second.xid, new XdrWriter().u32(2).bytes()));
  t.equal(await q, 2, 'the connection is still usable');
});

t.test('XDR: padding, 64-bit values and short replies', async (t) => {
  const b = new XdrWriter()
    .string('abcde')
    .u64(2n ** 63n + 5n)
    .opaque(Buffer.from([1, 2]))
    .bool(true)
    .bytes();
  t.equal(b.length, 4 + 8 + 8 + 4 + 4 + 4, 'strings and opaques pad to 4 bytes');
  const r = new XdrReader(b);
  t.equal(r.string(), 'abcde');
  t.equal(r.u64(), 2n ** 63n + 5n);
  t.same([...r.opaque()], [1, 2]);
  t.equal(r.bool(), true);
  t.match(
    kindOfSync(() => r.u32()),
    /^Internal: malformed RPC reply/,
  );
  t.match(
    kindOfSync(() => new XdrReader(new XdrWriter().u32(1 << 20).bytes()).opaque(64)),
    /^Internal: .*exceeds 64/,
  );
});

t.test('NFS status codes map to typed errors', async (t) => {
  const k = (s: number) => new NfsStatusError(s, 'MKDIR', 'srv:/share/x');
  t.equal(k(NFS3ERR.NOENT).kind, 'NotFound');
  t.equal(k(NFS3ERR.EXIST).kind, 'AlreadyExists');
  t.equal(k(NFS3ERR.NOSPC).kind, 'ResourceExhausted');
  t.equal(k(NFS3ERR.DQUOT).kind, 'ResourceExhausted');
  t.equal(k(NFS3ERR.NAMETOOLONG).kind, 'InvalidArgument');
  t.equal(k(NFS3ERR.ACCES).kind, 'FailedPrecondition');
  t.match(k(NFS3ERR.ACCES).message, /^NFS MKDIR srv:\/share\/x: NFS3ERR_ACCES \(permission denied: .*root squash/);
  t.equal(k(NFS3ERR.PERM).kind, 'FailedPrecondition');
  t.equal(k(NFS3ERR.ROFS).kind, 'FailedPrecondition');
  t.equal(k(NFS3ERR.STALE).kind, 'Unavailable');
  t.equal(k(NFS3ERR.JUKEBOX).kind, 'Unavailable');
  t.equal(k(12345).kind, 'Internal');
  t.match(k(12345).message, /status 12345/);
});
