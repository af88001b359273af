// The in-process signature check against blkid -p itself: each image is made by the real tool
// (mkfs.ext4/ext3/ext2, mkfs.xfs, mkswap) or written as the format defines it (LUKS, btrfs, an
// MBR, md 1.0 metadata, random data) into a sparse file, and blkid -p reads the same file. The
// check may only ever say "empty" where blkid finds nothing, and "ext4"/"xfs" where blkid says
// exactly that; everything else must be "unknown" (the stage then asks blkid).
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { extType, isXfs, type Signature, readSignature, START_BYTES, TAIL_BYTES } from '../../../src/os/signature.js';
import { parseBlkidExport } from '../../../src/os/blockdevices.js';

const MiB = 1024 * 1024;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'signature-test-'));
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
const has = (cmd: string) => spawnSync(cmd, ['-V'], { stdio: 'ignore' }).error === undefined;
const missing = ['blkid', 'mkfs.ext4', 'mkfs.ext3', 'mkfs.ext2', 'mkfs.xfs', 'mkswap'].find((c) => !has(c));
const skip = missing ? `needs ${missing}` : false;

let n = 0;
function image(sizeMiB: number, make?: (file: string) => void): string {
  const file = path.join(dir, `img-${n++}.raw`);
  fs.closeSync(fs.openSync(file, 'w'));
  fs.truncateSync(file, sizeMiB * MiB);
  make?.(file);
  return file;
}
const mk =
  (cmd: string, ...args: string[]) =>
  (file: string) =>
    void execFileSync(cmd, [...args, file], { stdio: ['ignore', 'pipe', 'pipe'] });
const write = (file: string, at: number, bytes: Buffer) => {
  const fd = fs.openSync(file, 'r+');
  fs.writeSync(fd, bytes, 0, bytes.length, at);
  fs.closeSync(fd);
};
/** The first `bytes` of a file (not the whole image: they are tens to hundreds of MiB). */
function head(file: string, bytes = START_BYTES): Buffer {
  const fd = fs.openSync(file, 'r');
  try {
    const b = Buffer.alloc(bytes);
    return b.subarray(0, fs.readSync(fd, b, 0, bytes, 0));
  } finally {
    fs.closeSync(fd);
  }
}
/** What the adapter reads, read from the file region by region; `reads` collects the regions asked for. */
async function classify(file: string, reads: number[] = []) {
  const fd = fs.openSync(file, 'r');
  try {
    return await readSignature(fs.fstatSync(fd).size, async (r) => {
      reads.push(r.length);
      const b = Buffer.alloc(r.length);
      return b.subarray(0, fs.readSync(fd, b, 0, r.length, r.offset));
    });
  } finally {
    fs.closeSync(fd);
  }
}
function blkid(file: string): { type?: string; ptType?: string; status: number } {
  const r = spawnSync('blkid', ['-p', '-o', 'export', file], { encoding: 'utf8' });
  const p = parseBlkidExport(r.stdout);
  return { ...(p.fsType && { type: p.fsType }), ...(p.ptType && { ptType: p.ptType }), status: r.status ?? -1 };
}
/** The check's answer is one blkid agrees with: empty ⇒ nothing found; fs ⇒ exactly that type. */
type Assert = Pick<typeof t, 'equal' | 'same'>;
async function agrees(t: Assert, file: string, expected: Signature['kind'], why: string) {
  const got = await classify(file);
  const b = blkid(file);
  t.equal(got.kind, expected, `${why}: in-process answer (blkid: ${JSON.stringify(b)})`);
  if (got.kind === 'empty') t.same(b, { status: 2 }, `${why}: blkid finds nothing either`);
  if (got.kind === 'fs')
    t.same(b, { type: got.fsType, status: 0 }, `${why}: blkid says ${got.fsType} and nothing else`);
  return b;
}

t.test('the two everyday answers: an empty disk, and the filesystem mkfs made', { skip }, async (t) => {
  await agrees(t, image(64), 'empty', 'all zero');
  await agrees(t, image(64, mk('mkfs.ext4', '-q', '-F', '-m0')), 'fs', 'mkfs.ext4');
  await agrees(t, image(320, mk('mkfs.xfs', '-q')), 'fs', 'mkfs.xfs');
  await agrees(
    t,
    image(64, mk('mkfs.ext4', '-q', '-F', '-b', '1024', '-I', '128')),
    'fs',
    'mkfs.ext4 with 1 KiB blocks',
  );
  await agrees(t, image(320, mk('mkfs.xfs', '-q', '-b', 'size=1024', '-i', 'size=512')), 'fs', 'mkfs.xfs 1 KiB blocks');
  await agrees(t, image(64, mk('mkfs.ext4', '-q', '-F', '-O', '^metadata_csum')), 'fs', 'ext4 without checksums');
  await agrees(t, image(3), 'empty', 'a disk smaller than the two regions');
});

t.test('other ext flavours are blkid’s to name: ext2, ext3, and ext4 marked for testing', { skip }, async (t) => {
  const ext3 = image(64, mk('mkfs.ext3', '-q', '-F'));
  t.equal(extType(head(ext3)), 'ext3');
  t.equal((await agrees(t, ext3, 'unknown', 'ext3')).type, 'ext3');
  const ext2 = image(64, mk('mkfs.ext2', '-q', '-F'));
  t.equal(extType(head(ext2)), 'ext2');
  t.equal((await agrees(t, ext2, 'unknown', 'ext2')).type, 'ext2');
  const dev = image(64, mk('mkfs.ext4', '-q', '-F', '-E', 'test_fs'));
  t.equal(extType(head(dev)), 'ext4dev');
  await agrees(t, dev, 'unknown', 'ext4 with test_fs');
});

t.test('a damaged superblock is never taken on trust', { skip }, async (t) => {
  const ext4 = image(64, mk('mkfs.ext4', '-q', '-F'));
  write(ext4, 1024 + 0x78, Buffer.from('tampered')); // s_volume_name: covered by the checksum
  t.equal(extType(head(ext4)), undefined, 'ext4 checksum mismatch: no ext4');
  await agrees(t, ext4, 'unknown', 'ext4 with a bad superblock checksum');
  const xfs = image(320, mk('mkfs.xfs', '-q'));
  write(xfs, 108, Buffer.from('tampered')); // sb_fname: covered by the v5 CRC
  t.notOk(isXfs(head(xfs, 64 * 1024)), 'xfs CRC mismatch: no xfs');
  await agrees(t, xfs, 'unknown', 'xfs with a bad CRC');
});

t.test('every foreign signature and any data sends the disk to blkid', { skip }, async (t) => {
  await agrees(t, image(64, mk('mkswap')), 'unknown', 'swap');
  // LUKS1 header: magic, version 1 (luks(5): "LUKS\xba\xbe", be16 version at 6).
  const luks = image(64, (f) =>
    write(f, 0, Buffer.concat([Buffer.from('LUKS\xba\xbe', 'latin1'), Buffer.from([0, 1])])),
  );
  await agrees(t, luks, 'unknown', 'a LUKS header');
  // btrfs: "_BHRfS_M" at 64 KiB + 0x40.
  await agrees(
    t,
    image(64, (f) => write(f, 0x10040, Buffer.from('_BHRfS_M'))),
    'unknown',
    'a btrfs magic',
  );
  // A DOS partition table: one partition entry and the 0x55AA boot signature.
  const mbr = Buffer.alloc(512);
  mbr.writeUInt8(0x83, 446 + 4);
  mbr.writeUInt32LE(2048, 446 + 8);
  mbr.writeUInt32LE(4096, 446 + 12);
  mbr.writeUInt16LE(0xaa55, 510);
  const dos = await agrees(
    t,
    image(64, (f) => write(f, 0, mbr)),
    'unknown',
    'a partition table',
  );
  t.equal(dos.ptType, 'dos', 'blkid sees the partition table');
  // Data without a signature: in the first MiB, where blkid's far magics are, and near the end —
  // blkid's word. Where no prober looks and beyond the first MiB: empty, as blkid -p and the zero
  // check said before.
  const data: [number, Signature['kind'], string][] = [
    [4096, 'unknown', 'random data, no signature'],
    [1 * MiB, 'unknown', 'data at 1 MiB (VMFS volume)'],
    [2 * MiB, 'unknown', 'data at 2 MiB (VMFS, bcachefs)'],
    [3 * MiB, 'empty', 'data at 3 MiB only'],
    [63 * MiB, 'unknown', 'data near the end only'],
  ];
  for (const [at, kind, why] of data)
    await agrees(
      t,
      image(64, (f) => write(f, at, randomBytes(512))),
      kind,
      why,
    );
});

t.test('a filesystem with something else next to it goes to blkid', { skip }, async (t) => {
  const withMbr = image(64, mk('mkfs.ext4', '-q', '-F'));
  write(withMbr, 0, mbr0());
  await agrees(t, withMbr, 'unknown', 'ext4 plus an MBR in its boot block');
  const withSwap = image(64, mk('mkfs.ext4', '-q', '-F', '-b', '4096'));
  write(withSwap, 4096 - 10, Buffer.from('SWAPSPACE2'));
  await agrees(t, withSwap, 'unknown', 'ext4 plus a swap magic');
  const withBtrfs = image(320, mk('mkfs.xfs', '-q'));
  write(withBtrfs, 0x10040, Buffer.from('_BHRfS_M'));
  await agrees(t, withBtrfs, 'unknown', 'xfs plus a btrfs magic');
  // md 1.0 keeps its superblock 8 KiB before the 4 KiB-aligned end, the filesystem at 0: a RAID
  // member must not be mounted as the ext4 inside it.
  const md = image(64, mk('mkfs.ext4', '-q', '-F'));
  write(md, 64 * MiB - 0x2000, Buffer.from([0xfc, 0x4e, 0x2b, 0xa9]));
  await agrees(t, md, 'unknown', 'ext4 with md 1.0 metadata at the end');
});

function mbr0(): Buffer {
  const b = Buffer.alloc(512);
  b.writeUInt16LE(0xaa55, 510);
  return b;
}

t.test('the regions cover every offset blkid reads, and a filesystem costs two reads', { skip }, async (t) => {
  t.ok(START_BYTES >= 64 * 1024 + 0x48, 'btrfs at 64 KiB + 0x40, swap at the end of a 64 KiB page');
  t.ok(TAIL_BYTES >= 3087 * 512 + 511, 'promise RAID metadata up to 3087 sectors before the last whole one');
  t.equal(TAIL_BYTES % 4096, 0, 'whole pages');
  const reads: number[] = [];
  t.same(await classify(image(64, mk('mkfs.ext4', '-q', '-F')), reads), { kind: 'fs', fsType: 'ext4' });
  t.same(reads, [START_BYTES, TAIL_BYTES], 'ext4: the start and the tail');
  reads.length = 0;
  t.same(await classify(image(64), reads), { kind: 'empty' });
  t.same(reads, [START_BYTES, TAIL_BYTES, MiB + 4096 - START_BYTES, 4096], 'empty: the rest of the first MiB, 2 MiB');
});

t.test('on an empty disk the rest of the first MiB is read while the tail still is', async (t) => {
  // A slow tail: it answers only once the rest was asked for, or after 300 ms. Read one after
  // the other (the start and tail first, then the rest), an empty disk's check waits for the
  // whole tail before it starts on the rest of the first MiB.
  const size = 64 * MiB;
  const events: string[] = [];
  let restAsked: () => void = () => undefined;
  const asked = new Promise<void>((resolve) => (restAsked = resolve));
  const got = await readSignature(size, async (r) => {
    const zeros = new Uint8Array(r.length);
    if (r.offset === 0) return zeros;
    if (r.offset === size - TAIL_BYTES) {
      await Promise.race([asked, new Promise((resolve) => setTimeout(resolve, 300))]);
      events.push('tail read');
      return zeros;
    }
    events.push(`asked for ${r.offset}`);
    restAsked();
    return zeros;
  });
  t.same(got, { kind: 'empty' });
  t.same(
    events,
    [`asked for ${START_BYTES}`, `asked for ${2 * MiB}`, 'tail read'],
    'the rest went out before the tail came back',
  );
});

t.test('a formatted start is not followed by the rest of the first MiB, whatever the tail holds', async (t) => {
  const size = 64 * MiB;
  const asked: number[] = [];
  const start = new Uint8Array(START_BYTES);
  start[1080] = 0x53; // something non-zero at the start: not an empty disk
  const got = await readSignature(size, async (r) => {
    asked.push(r.offset);
    return r.offset === 0 ? start : new Uint8Array(r.length).fill(r.offset === size - TAIL_BYTES ? 1 : 0);
  });
  t.same(got, { kind: 'unknown' }, 'a non-zero tail: blkid decides');
  t.same(asked, [0, size - TAIL_BYTES], 'only the start and the tail');
});
