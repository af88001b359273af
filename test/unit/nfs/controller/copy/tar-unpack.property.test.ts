// Properties of unpacking tar archives (tar-paths.ts, tar-unpack.ts) over an in-memory sink that
// records every create: for any generated archive (names with `..`, `.`, absolute paths, repeated
// slashes and NULs; directories, files, symlinks to anywhere, hard links, duplicates), nothing is
// ever created outside the target or inside anything but a directory the archive made (never
// through a symlink or a file), a hard link only ever names a file the archive made, and an
// archive is either unpacked or refused with INVALID_ARGUMENT.
//   PBT_SEED=<n> replays a run; PBT_RUNS=<n> runs longer.
import t from 'tap';
import fc from 'fast-check';
import path from 'node:path';
import tar from 'tar-stream';
import { AlreadyExists, isCsiError } from '../../../../../src/errors.js';
import type { FileType } from '../../../../../src/nfs/client/nfs3.js';
import { Slots } from '../../../../../src/nfs/controller/copy/copy-tree.js';
import { entrySegments, printable, unsafeName } from '../../../../../src/nfs/controller/copy/tar-paths.js';
import { type UnpackSink, unpackTar } from '../../../../../src/nfs/controller/copy/tar-unpack.js';
import { pbtParams } from '../store/ownership-model.js';

const ROOT = '/target';
const { seed, numRuns } = pbtParams(300);

t.test('entry names: refused, or segments that resolve strictly inside the target', async (t) => {
  const seg = fc.constantFrom('a', 'b', '.', '..', '', 'x\0y', 'é', 'a'.repeat(256));
  const name = fc.oneof(
    fc.string(),
    fc.array(seg, { maxLength: 6 }).map((s) => s.join('/')),
    fc.array(seg, { maxLength: 6 }).map((s) => '/' + s.join('/')),
  );
  fc.assert(
    fc.property(name, (n) => {
      let segs: string[];
      try {
        segs = entrySegments(n);
      } catch (e) {
        if (!isCsiError(e, 'InvalidArgument')) throw e;
        if (unsafeName(n) === undefined)
          throw new Error(`refused without a reason: ${JSON.stringify(n)}`, { cause: e });
        return;
      }
      for (const s of segs) if (s === '' || s === '.' || s === '..' || /[/\0]/.test(s)) throw new Error(s);
      const at = path.posix.resolve(ROOT, ...segs);
      if (!(at === ROOT || at.startsWith(ROOT + '/'))) throw new Error(`${JSON.stringify(n)} lands at ${at}`);
      if (n.startsWith('/') || n.split('/').includes('..')) throw new Error(`accepted ${JSON.stringify(n)}`);
    }),
    { seed, numRuns: numRuns * 10 },
  );
  t.equal(printable('a\nb\x1b'), 'a\\x0ab\\x1b', 'control characters never reach a message as they are');
  t.same(entrySegments('./a//b/./c/'), ['a', 'b', 'c']);
  t.same(entrySegments('./'), []);
});

interface MemNode {
  type: FileType;
  path: string;
  madeBy: 'archive' | 'root';
  target?: string;
}

/** A sink whose handles are the nodes it made; every create is checked where it happens. */
function memSink(violations: string[]) {
  const nodes = new Map<string, MemNode>([[ROOT, { type: 'dir', path: ROOT, madeBy: 'root' }]]);
  const create = (dir: MemNode, name: string, type: FileType, target?: string): MemNode => {
    if (dir.type !== 'dir') violations.push(`created ${name} inside the ${dir.type} ${dir.path}`);
    if (name === '' || name === '.' || name === '..' || name.includes('/'))
      violations.push(`created the name ${JSON.stringify(name)}`);
    const p = `${dir.path}/${name}`;
    if (!(p.startsWith(ROOT + '/') && path.posix.resolve(p) === p)) violations.push(`created ${p} outside ${ROOT}`);
    if (nodes.has(p)) throw new AlreadyExists(`${p} exists`);
    const n: MemNode = { type, path: p, madeBy: 'archive', ...(target !== undefined && { target }) };
    nodes.set(p, n);
    return n;
  };
  const sink: UnpackSink<MemNode> = {
    mkdir: async (dir, name) => create(dir, name, 'dir'),
    createFile: async (dir, name) => create(dir, name, 'file'),
    write: async () => Buffer.alloc(8),
    commit: async () => Buffer.alloc(8),
    symlink: async (dir, name, target) => create(dir, name, 'symlink', target),
    mknod: async (dir, name, a) => create(dir, name, a.type),
    async link(file, dir, name) {
      if (file.type !== 'file' || file.madeBy !== 'archive') violations.push(`hard link to ${file.path}`);
      create(dir, name, 'file');
    },
    setattrs: async (h) => {
      if (!nodes.has(h.path)) violations.push(`setattr of ${h.path}, which it never made`);
    },
    lookup: async (dir, name) => {
      const n = nodes.get(`${dir.path}/${name}`);
      return n ? { handle: n, type: n.type } : null;
    },
  };
  return { sink, root: nodes.get(ROOT) as MemNode, nodes };
}

type Entry = Partial<tar.Header> & { name: string };

async function archive(entries: Entry[]): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  pack.on('data', (c: unknown) => chunks.push(c as Buffer));
  const done = new Promise<void>((r) => pack.on('end', () => r()));
  for (const e of entries) {
    if (e.type === 'file') pack.entry(e, 'data');
    else pack.entry(e);
  }
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

t.test('no generated archive creates anything outside the target or through a non-directory', async (t) => {
  const seg = fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom('a', 'b', 'ln') },
    { weight: 1, arbitrary: fc.constantFrom('.', '..') },
  );
  const rel = fc.array(seg, { minLength: 1, maxLength: 4 }).map((s) => s.join('/'));
  const name = fc.oneof(
    { weight: 4, arbitrary: rel },
    { weight: 2, arbitrary: rel.map((r) => `./${r}`) },
    { weight: 1, arbitrary: rel.map((r) => `/${r}`) },
    { weight: 1, arbitrary: rel.map((r) => r.replace('/', '//')) },
  );
  const entry: fc.Arbitrary<Entry> = fc.oneof(
    name.map((n) => ({ name: n, type: 'directory' as const, mode: 0o755 })),
    name.map((n) => ({ name: n, type: 'file' as const, mode: 0o644 })),
    fc.tuple(name, fc.constantFrom('..', '/etc', 'a', '../..', 'b/..')).map(([n, l]) => ({
      name: n,
      type: 'symlink' as const,
      linkname: l,
    })),
    fc.tuple(name, name).map(([n, l]) => ({ name: n, type: 'link' as const, linkname: l })),
  );
  let unpacked = 0;
  let refused = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(entry, { maxLength: 12 }), async (entries) => {
      const bytes = await archive(entries);
      const violations: string[] = [];
      const { sink, root } = memSink(violations);
      const read = async (offset: number, count: number) => {
        const data = bytes.subarray(offset, offset + count);
        return { data, eof: offset + data.length >= bytes.length };
      };
      try {
        await unpackTar(read, sink, root, { slots: new Slots(4), archive: 'mem.tar' });
        unpacked++;
      } catch (e) {
        if (!isCsiError(e, 'InvalidArgument')) throw e;
        refused++;
      }
      if (violations.length) throw new Error(violations.join('\n'));
    }),
    { seed, numRuns },
  );
  t.comment(`tar unpack property: ${unpacked} unpacked, ${refused} refused, seed ${seed}`);
  t.ok(unpacked > 0 && refused > 0, 'both outcomes reached');
});
