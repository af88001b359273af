// Server-side copy over NFSv4.2 (nfs4ServerCopy) against a scripted server, and the tree copy's
// use of it: CLONE first, COPY (short replies continued) when the file system cannot clone, the
// bytes through the controller when the server cannot copy; what a server refused is not asked
// again; a COPY that went asynchronous is cancelled, never taken as done; and the durability
// rule of a WRITE holds for server-copied files (every verifier equals the final COMMIT's).
import t from 'tap';
import { NFS4ERR, Nfs4StatusError, type Op4 } from '../../../../../src/nfs/client/nfs4.js';
import type { Copied } from '../../../../../src/nfs/client/nfs4-io.js';
import { nfs4ServerCopy, type Compounder, type Made4 } from '../../../../../src/nfs/controller/copy/nfs4-copy.js';
import {
  type CopyAttrs,
  type CopySink,
  type CopySource,
  type ServerCopy,
  type SourceEntry,
  Slots,
  TreeCopy,
} from '../../../../../src/nfs/controller/copy/copy-tree.js';
import { outcomeText } from '../../../../helpers/outcome.js';

const VERF = Buffer.from('verf0001');
const MiB = 1024 * 1024;

/** A 4.2 server whose CLONE and COPY answer as scripted; COPY copies at most `copyCap` bytes a call. */
function server(o: { clone?: number; copy?: number; copyCap?: number; async?: boolean; minor?: 0 | 1 | 2 } = {}) {
  const sent: string[] = [];
  const c: Compounder = {
    minorVersion: o.minor ?? 2,
    compound: async (ops: Op4[]) => {
      sent.push(ops.map((x) => x.name).join(','));
      const out: unknown[] = [];
      for (const x of ops) {
        if (x.name === 'CLONE' && o.clone) throw new Nfs4StatusError(o.clone, 'CLONE', 'x');
        if (x.name === 'COPY') {
          if (o.copy) throw new Nfs4StatusError(o.copy, 'COPY', 'x');
          // The asked count is the last u64 before the two bools and the empty server list.
          const args = argsOf(x);
          const count = Number(args.readBigUInt64BE(args.length - 20));
          const done: Copied = {
            callback: o.async ? Buffer.alloc(16, 7) : undefined,
            count: Math.min(count, o.copyCap ?? count),
            committed: 0,
            verf: VERF,
          };
          out.push(done);
        } else out.push(x.name === 'COMMIT' ? VERF : undefined);
      }
      return out;
    },
  };
  return { c, sent };
}

function argsOf(x: Op4): Buffer {
  const chunks: Buffer[] = [];
  // A writer that records the bytes the operation encodes.
  const w = {
    fixed: (b: Buffer) => (chunks.push(b), w),
    u64: (v: number | bigint) => {
      const b = Buffer.alloc(8);
      b.writeBigUInt64BE(BigInt(v));
      chunks.push(b);
      return w;
    },
    u32: (v: number) => {
      const b = Buffer.alloc(4);
      b.writeUInt32BE(v);
      chunks.push(b);
      return w;
    },
    bool: (v: boolean) => w.u32(v ? 1 : 0),
  };
  x.args?.(w as never);
  return Buffer.concat(chunks);
}

const attrs = (size: number, fsid = '1:2'): CopyAttrs => ({
  type: 'file',
  mode: 0o644,
  uid: 0,
  gid: 0,
  size,
  nlink: 1,
  fileid: '9',
  fsid,
  atime: { sec: 0, nsec: 0 },
  mtime: { sec: 0, nsec: 0 },
  rdev: { major: 0, minor: 0 },
});
const entry = (size: number, fsid?: string): SourceEntry<Buffer> => ({
  name: 'f',
  handle: Buffer.from('src'),
  attrs: attrs(size, fsid),
});
const open = (): Made4 => ({ fh: Buffer.from('dst'), stateid: Buffer.alloc(16, 1) });
const where = (p: string) => `/share/${p}`;
function copier(c: Compounder): ServerCopy<Buffer, Made4> {
  const sc = nfs4ServerCopy(c, where);
  if (!sc) throw new Error('an NFSv4.2 client has server-side copy');
  return sc;
}

t.test('no server-side copy below NFSv4.2', async (t) => {
  for (const minor of [0, 1] as const) t.equal(nfs4ServerCopy(server({ minor }).c, where), undefined, `4.${minor}`);
});

t.test('CLONE first: one COMPOUND, its COMMIT verifier kept for the final check', async (t) => {
  const s = server();
  const sc = copier(s.c);
  t.same(await sc.copy(entry(10 * MiB), open(), 'f', {}), { how: 'clone', verfs: [VERF], bytes: 10 * MiB });
  t.same(s.sent, ['PUTFH,SAVEFH,PUTFH,COMMIT,CLONE'], 'source saved, destination current, no COPY');
});

t.test(
  'a file system that cannot clone: COPY, continued after short replies; CLONE not asked there again',
  async (t) => {
    const s = server({ clone: NFS4ERR.NOTSUPP, copyCap: 4 * MiB });
    const sc = copier(s.c);
    t.same(await sc.copy(entry(10 * MiB), open(), 'f', {}), {
      how: 'copy',
      verfs: [VERF, VERF, VERF],
      bytes: 10 * MiB,
    });
    t.same(s.sent.slice(1), ['PUTFH,SAVEFH,PUTFH,COPY', 'PUTFH,SAVEFH,PUTFH,COPY', 'PUTFH,SAVEFH,PUTFH,COPY']);
    s.sent.length = 0;
    await sc.copy(entry(MiB), open(), 'g', {});
    t.same(s.sent, ['PUTFH,SAVEFH,PUTFH,COPY'], 'same file system: straight to COPY');
    s.sent.length = 0;
    await sc.copy(entry(MiB, '7:7'), open(), 'h', {}).catch(() => undefined);
    t.match(s.sent[0], /CLONE$/, 'another file system is asked to CLONE');
  },
);

t.test(
  'a server that cannot COPY: null (the bytes go through the controller), and it is not asked again',
  async (t) => {
    for (const status of [NFS4ERR.NOTSUPP, NFS4ERR.OP_ILLEGAL, NFS4ERR.OFFLOAD_NO_REQS]) {
      const s = server({ clone: NFS4ERR.NOTSUPP, copy: status });
      const sc = copier(s.c);
      t.equal(await sc.copy(entry(MiB), open(), 'f', {}), null, `status ${status}`);
      s.sent.length = 0;
      t.equal(await sc.copy(entry(MiB), open(), 'g', {}), null);
      t.same(s.sent, [], 'nothing asked the second time');
      // A new client (the process restarted, or another server) asks again.
      t.equal(nfs4ServerCopy(server({ minor: 2 }).c, where) !== undefined, true);
    }
  },
);

t.test('any other failure is the copy failing, not a reason to fall back', async (t) => {
  const s = server({ clone: NFS4ERR.NOSPC });
  t.match(await outcomeText(copier(s.c).copy(entry(MiB), open(), 'f', {})), /NFS4ERR_NOSPC/);
  const c = server({ clone: NFS4ERR.NOTSUPP, copy: NFS4ERR.IO });
  t.match(await outcomeText(copier(c.c).copy(entry(MiB), open(), 'f', {})), /NFS4ERR_IO/);
});

t.test('a COPY the server ran asynchronously is cancelled and the copy retried without COPY', async (t) => {
  const s = server({ clone: NFS4ERR.NOTSUPP, async: true });
  const sc = copier(s.c);
  t.match(await outcomeText(sc.copy(entry(MiB), open(), 'f', {})), /^Unavailable: .*asynchronously/);
  t.same(s.sent.slice(-1), ['PUTFH,OFFLOAD_CANCEL']);
  t.equal(await sc.copy(entry(MiB), open(), 'g', {}), null, 'the retry moves the bytes itself');
});

/** One file of `size` bytes; a sink that keeps what is written and answers `commitVerf`. */
function oneFile(size: number, commitVerf: Buffer) {
  const data = Buffer.alloc(size, 5);
  const written: number[] = [];
  const src: CopySource<string> = {
    entries: async (dir) => (dir === 'root' ? [{ name: 'f', handle: 'f', attrs: attrs(size) }] : []),
    read: async (_f, offset, count) => ({
      data: data.subarray(offset, offset + count),
      eof: offset + count >= size,
    }),
    readlink: async () => '',
  };
  const sink: CopySink<string> = {
    mkdir: async () => 'd',
    createFile: async () => 'f',
    write: async (_f, _off, d) => (written.push(d.length), VERF),
    commit: async () => commitVerf,
    symlink: async () => 's',
    mknod: async () => 'n',
    link: async () => undefined,
    setattrs: async () => undefined,
  };
  return { src, sink, written };
}

const run = (f: ReturnType<typeof oneFile>, server?: ServerCopy<string, string>) =>
  new TreeCopy(f.src, f.sink, { fsid: '1:2', slots: new Slots(2), describe: (p) => p }, server).run(
    'root',
    { ...attrs(0), type: 'dir' },
    'to',
    '',
  );

t.test('the tree copy: server-copied files are counted, skipped bytes never read', async (t) => {
  const f = oneFile(300_000, VERF);
  const stats = await run(f, { copy: async () => ({ how: 'copy', verfs: [VERF], bytes: 300_000 }) });
  t.match(stats, { files: 1, serverCopied: 1, cloned: 0, bytes: 300_000 });
  t.same(f.written, [], 'nothing went through the controller');
  const g = oneFile(300_000, VERF);
  t.match(await run(g, { copy: async () => null }), { files: 1, serverCopied: 0, bytes: 300_000 });
  t.equal(
    g.written.reduce((a, b) => a + b, 0),
    300_000,
    'a server that cannot: the bytes are moved here',
  );
});

t.test(
  'the tree copy: a server restart between COPY and COMMIT (verifiers differ) fails the copy for a retry',
  async (t) => {
    const f = oneFile(10, Buffer.from('rebooted'));
    t.match(
      await outcomeText(run(f, { copy: async () => ({ how: 'clone', verfs: [VERF], bytes: 10 }) })),
      /^Unavailable: .*restarted during the copy/,
    );
  },
);
