// Hostile csi-driver-nfs archives get an answer a person can act on, never INTERNAL: an entry
// whose header (or PAX size) declares more data than the archive holds, uid/gid outside what NFS
// can set (not wrapped), and file data beyond the claim's requested capacity (a gzip bomb).
import t from 'tap';
import { gzipSync } from 'node:zlib';
import tar from 'tar-stream';
import { Slots } from '../../../../../src/nfs/controller/copy/copy-tree.js';
import { type UnpackSink, unpackTar } from '../../../../../src/nfs/controller/copy/tar-unpack.js';
import { outcomeText } from '../../../../helpers/outcome.js';

/** A sink that makes nothing but counts what it was given. */
function sink() {
  const made = { entries: 0, bytes: 0 };
  const s: UnpackSink<string> = {
    mkdir: async (_d, name) => (made.entries++, name),
    createFile: async (_d, name) => (made.entries++, name),
    // Slow as a server is: the archive's end arrives while a write is under way.
    write: async (_f, _off, data) => {
      await new Promise((r) => setTimeout(r, 2));
      made.bytes += data.length;
      return Buffer.alloc(8);
    },
    commit: async () => Buffer.alloc(8),
    symlink: async (_d, name) => (made.entries++, name),
    mknod: async (_d, name) => (made.entries++, name),
    link: async () => {
      made.entries++;
    },
    setattrs: async () => {},
    lookup: async () => null,
  };
  return { s, made };
}

async function pack(entries: Array<[Partial<tar.Header> & { name: string }, Buffer | string]>): Promise<Buffer> {
  const p = tar.pack();
  const chunks: Buffer[] = [];
  p.on('data', (c: unknown) => chunks.push(c as Buffer));
  const done = new Promise<void>((r) => p.on('end', () => r()));
  for (const [h, body] of entries) p.entry(h, body);
  p.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** The archive with the size field of its first header set to `size` (octal) and the checksum redone. */
function declare(a: Buffer, size: number): Buffer {
  const b = Buffer.from(a);
  b.write(size.toString(8).padStart(11, '0') + '\0', 124, 12, 'ascii');
  return checksum(b);
}

/** The archive with the uid (offset 108) or gid (116) of its first header set in base-256, as GNU tar writes large ids. */
function setId(a: Buffer, offset: 108 | 116, id: number): Buffer {
  const b = Buffer.from(a);
  b.fill(0, offset, offset + 8);
  b[offset] = 0x80;
  b.writeUIntBE(id, offset + 2, 6);
  return checksum(b);
}

function checksum(b: Buffer): Buffer {
  b.fill(' ', 148, 156);
  let sum = 0;
  for (let i = 0; i < 512; i++) sum += b[i] ?? 0;
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'ascii');
  return b;
}

function unpack(archive: Buffer, maxBytes?: number) {
  const { s, made } = sink();
  const read = async (offset: number, count: number) => ({
    data: archive.subarray(offset, offset + count),
    eof: offset + count >= archive.length,
  });
  const run = unpackTar(read, s, 'root', { slots: new Slots(2), archive: 'snap/src.tar.gz', maxBytes });
  return { run, made };
}

t.test('an entry declaring more data than the archive holds is INVALID_ARGUMENT, not INTERNAL', async (t) => {
  const small = await pack([[{ name: 'big', size: 4 }, 'data']]);
  // Declares 8 GiB - 1 (the most an octal size field holds) and ends after 4 bytes: truncated.
  const huge = declare(small, 0o77777777777).subarray(0, 1024);
  t.match(await outcomeText(unpack(huge).run), /^InvalidArgument: archive snap\/src.tar.gz/);
  t.match(await outcomeText(unpack(gzipSync(huge)).run), /^InvalidArgument: archive snap\/src.tar.gz/);
  const pax = await pack([[{ name: 'f', size: 4, pax: { size: '1099511627776' } }, 'data']]);
  t.match(await outcomeText(unpack(pax).run), /^InvalidArgument: archive snap\/src.tar.gz/);
});

t.test('uid or gid outside what NFS can set is refused, not wrapped', async (t) => {
  const a = await pack([[{ name: 'f', size: 4 }, 'data']]);
  for (const [offset, id] of [
    [108, 2 ** 33],
    [116, 2 ** 32],
  ] as const)
    t.match(
      await outcomeText(unpack(setId(a, offset, id)).run),
      /^InvalidArgument: .*outside 0\.\.4294967294/,
      `${offset}: ${id}`,
    );
  t.equal(await outcomeText(unpack(setId(a, 108, 2 ** 32 - 2)).run), 'no error', 'the largest id is set as it is');
});

t.test("file data beyond the claim's requested capacity is OUT_OF_RANGE before it is written", async (t) => {
  const mib = Buffer.alloc(1 << 20);
  const bomb = gzipSync(
    await pack([
      [{ name: 'a', size: mib.length }, mib],
      [{ name: 'b', size: mib.length }, mib],
      [{ name: 'c', size: mib.length }, mib],
    ]),
  );
  t.ok(bomb.length < 20_000, `3 MiB of data in ${bomb.length} bytes`);
  const { run, made } = unpack(bomb, 2 * mib.length + 10);
  t.match(
    await outcomeText(run),
    /^OutOfRange: .*entry "c" declares 1048576 bytes.*requested capacity \(2097162 bytes\)/,
  );
  t.equal(made.bytes, 2 * mib.length, 'the third entry was not written');
  t.equal(await outcomeText(unpack(bomb, 3 * mib.length).run), 'no error', 'within the capacity it unpacks');
});
