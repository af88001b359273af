// The answer `blkid -p` would give for a disk, decided in-process from two reads of the device
// when the answer is one of the two the stage path meets every day — "nothing at all" and "the
// ext4 or xfs filesystem this driver made" — and "ask blkid" for everything else. blkid -p is a
// fork+exec of a library that runs ~80 probers (3–6 ms on a busy 2-core node, bench/node.ts);
// every stage needs the answer before it may format or mount.
//
// Where libblkid's probers look (util-linux libblkid/src/superblocks/*.c, partitions/*.c):
// - from the start of the device: below 512 KiB (ufs at 256 KiB, ZFS labels L0/L1), and the
//   magics at 1 MiB (VMFS volume) and 2 MiB (VMFS, bcachefs); LUKS2 secondary headers (up to
//   4 MiB) are only scanned when not safe-probing, which blkid -p is. Probers that read further
//   (udf, hfs) do so only after a magic below 64 KiB matched.
// - from the end: RAID metadata and labels — promise (up to 3087 sectors ≈ 1.5 MiB before the
//   end), bcachefs (-1 MiB), ZFS labels L2/L3 (last 512 KiB, aligned down to 256 KiB), md 0.90
//   (last 64 KiB-aligned 64 KiB) and 1.0 (8 KiB before the 4 KiB-aligned end), DDF (sector
//   -1/-257), Intel/LSI/NVIDIA/JMicron/SiI/VIA/Adaptec/HighPoint (last 11 sectors), DRBD
//   (-4 KiB), NILFS2's backup superblock, the GPT backup header (last sector, and only behind a
//   protective MBR at sector 0).
// - no prober matches bytes that are all zero: each compares a non-zero magic (the sysv, ufs,
//   xfs, md, LUKS, ZFS and firmware-RAID probers without a table magic check one in code).
// So a zero first MiB (the rule that keeps a raw block volume's data from being formatted over,
// blkid or not), zero 4 KiB at 1 MiB and at 2 MiB, and a zero last TAIL_BYTES (1544 KiB) are a disk where
// blkid -p finds nothing: the same answer, not an approximation of it. The reads are what cost
// (a block device's page cache is dropped on its last close, so each is cold: ~0.7 ms per MiB
// on a loop device here): the start is read in two steps, 68 KiB first, the rest of the first
// MiB only when those were zero.
// A filesystem is accepted only when it passes the checks blkid's prober for it makes (ext4:
// the feature rules that tell ext2/3/4 and jbd apart, the superblock checksum; xfs: the
// geometry sanity checks and the v5 checksum), everything blkid reads outside the filesystem is
// zero (the tail; for ext4 also its 1 KiB boot block, where an MBR, a GPT's protective MBR, a
// LUKS, xfs or md 1.1 header or an LVM label would be), and none of the usual leftovers sits
// inside it (FOREIGN: swap, btrfs, md 1.2, bcache, LUKS, MBR, GPT). What this does not repeat
// is blkid's scan of all its ~80 magics inside the filesystem's own blocks: a signature of
// another kind planted there makes blkid answer "ambivalent" (the stage fails), while here the
// kernel mounts the ext4/xfs that the superblock and its checksum vouch for. A used disk whose
// last 1.5 MiB hold data always goes to blkid.
import { crc32c } from '@aws-crypto/crc32c';

/** First read from the start: every filesystem and FOREIGN check lies inside it. */
export const START_BYTES = 68 * 1024;
/**
 * Read before the end of the device: from promise's farthest sector (3087 sectors before the
 * last whole one, so at most 3087 × 512 + 511 bytes before the end) on, rounded up to 4 KiB.
 */
export const TAIL_BYTES = 3088 * 512;
const MiB = 1024 * 1024;

export interface Region {
  offset: number;
  length: number;
}

export type Signature =
  /** No signature anywhere blkid -p looks, and no data in the first MiB. */
  | { kind: 'empty' }
  /** Exactly this filesystem, as blkid -p would report it, and nothing else blkid could see. */
  | { kind: 'fs'; fsType: 'ext4' | 'xfs' }
  /** Anything else (another signature, data, a damaged superblock): ask blkid -p. */
  | { kind: 'unknown' };

const isZero = (b: Uint8Array): boolean => {
  // Buffer#equals is a memcmp; compare in 64 KiB slices against one shared zero block.
  for (let off = 0; off < b.length; off += ZERO.length) {
    const part = b.subarray(off, Math.min(b.length, off + ZERO.length));
    if (!Buffer.from(part.buffer, part.byteOffset, part.length).equals(ZERO.subarray(0, part.length))) return false;
  }
  return true;
};
const ZERO = Buffer.alloc(64 * 1024);

// ext2/3/4 superblock (kernel fs/ext4/ext4.h, struct ext4_super_block): 1024 bytes at 1024.
const EXT_SB = 1024;
const EXT_MAGIC = 0xef53; // s_magic, le16 at 0x38
const EXT_COMPAT = 0x5c;
const EXT_INCOMPAT = 0x60;
const EXT_RO_COMPAT = 0x64;
const EXT_FLAGS = 0x160;
const EXT_LOG_BLOCK_SIZE = 0x18;
const EXT_CHECKSUM = 0x3fc;
const INCOMPAT_RECOVER = 0x4;
const INCOMPAT_JOURNAL_DEV = 0x8;
const INCOMPAT_FILETYPE = 0x2;
const INCOMPAT_META_BG = 0x10;
const RO_COMPAT_SPARSE_SUPER = 0x1;
const RO_COMPAT_LARGE_FILE = 0x2;
const RO_COMPAT_BTREE_DIR = 0x4;
const RO_COMPAT_METADATA_CSUM = 0x400;
const FLAGS_TEST_FILESYS = 0x4;

/**
 * blkid's verdict on the ext superblock: 'ext4' when its ext4 prober claims it, another string
 * for the other ext probers (jbd, ext4dev, ext3, ext2), undefined when none (no magic, bad
 * checksum, an impossible block size).
 */
export function extType(head: Uint8Array): string | undefined {
  if (head.length < EXT_SB + 1024) return undefined;
  const sb = Buffer.from(head.buffer, head.byteOffset + EXT_SB, 1024);
  if (sb.readUInt16LE(0x38) !== EXT_MAGIC) return undefined;
  const compat = sb.readUInt32LE(EXT_COMPAT);
  const incompat = sb.readUInt32LE(EXT_INCOMPAT);
  const roCompat = sb.readUInt32LE(EXT_RO_COMPAT);
  if (roCompat & RO_COMPAT_METADATA_CSUM) {
    // ext4 stores crc32c(~0, sb[0..0x3fc)) without the final inversion the standard CRC applies.
    const raw = (crc32c(sb.subarray(0, EXT_CHECKSUM)) ^ 0xffffffff) >>> 0;
    if (raw !== sb.readUInt32LE(EXT_CHECKSUM)) return undefined;
  } else if (sb.readUInt32LE(EXT_LOG_BLOCK_SIZE) >= 256) {
    return undefined;
  }
  if (incompat & INCOMPAT_JOURNAL_DEV) return 'jbd';
  const ext3RoCompat = RO_COMPAT_SPARSE_SUPER | RO_COMPAT_LARGE_FILE | RO_COMPAT_BTREE_DIR;
  const ext3Incompat = INCOMPAT_FILETYPE | INCOMPAT_RECOVER | INCOMPAT_META_BG;
  const beyondExt3 = (roCompat & ~ext3RoCompat) !== 0 || (incompat & ~ext3Incompat) !== 0;
  if (!beyondExt3) return compat & 0x4 /* has_journal */ ? 'ext3' : 'ext2';
  if (sb.readUInt32LE(EXT_FLAGS) & FLAGS_TEST_FILESYS) return 'ext4dev';
  return 'ext4';
}

// xfs superblock (xfs_format.h, struct xfs_dsb), big-endian, at 0.
const XFS_MAGIC = 0x58465342; // "XFSB"

/** Whether blkid's xfs prober accepts the superblock at 0: magic, geometry and (v5) checksum. */
export function isXfs(head: Uint8Array): boolean {
  if (head.length < 512) return false;
  const sb = Buffer.from(head.buffer, head.byteOffset, Math.min(head.length, 64 * 1024));
  if (sb.readUInt32BE(0) !== XFS_MAGIC) return false;
  const blocksize = sb.readUInt32BE(4);
  const dblocks = sb.readBigUInt64BE(8);
  const rextsize = sb.readUInt32BE(80);
  const agblocks = sb.readUInt32BE(84);
  const agcount = sb.readUInt32BE(88);
  const versionnum = sb.readUInt16BE(100);
  const sectsize = sb.readUInt16BE(102);
  const inodesize = sb.readUInt16BE(104);
  const blocklog = sb[120] ?? 0;
  const sectlog = sb[121] ?? 0;
  const inodelog = sb[122] ?? 0;
  const inopblog = sb[123] ?? 0;
  const imaxPct = sb[127] ?? 0;
  const features2 = sb.readUInt32BE(200);
  const rtext = rextsize * blocksize;
  const sane =
    agcount > 0 &&
    sectlog >= 9 &&
    sectlog <= 15 &&
    sectsize === 1 << sectlog &&
    blocklog >= 9 &&
    blocklog <= 16 &&
    blocksize === 2 ** blocklog &&
    inodelog >= 8 &&
    inodelog <= 11 &&
    inodesize === 1 << inodelog &&
    blocklog - inodelog === inopblog &&
    rtext <= 1024 * 1024 * 1024 &&
    rtext >= 4 * 1024 &&
    imaxPct <= 100 &&
    dblocks !== 0n &&
    dblocks <= BigInt(agcount) * BigInt(agblocks) &&
    dblocks >= BigInt(agcount - 1) * BigInt(agblocks) + 64n;
  if (!sane) return false;
  if ((versionnum & 0x0f) !== 5) return true;
  // v5: the CRC bit must be set, and crc32c over the sector with sb_crc (at 224) taken as zero.
  if (!(versionnum & 0x8000) || !(features2 & 0x100) || sb.length < sectsize) return false;
  const sector = Buffer.from(sb.subarray(0, sectsize));
  const stored = sector.readUInt32LE(224);
  sector.fill(0, 224, 228);
  return crc32c(sector) === stored;
}

/**
 * What blkid -p would say about a device of `size` bytes, reading it through `read` (which
 * returns exactly the region asked for): the start and the tail together, and — as soon as the
 * start turned out zero — the rest of the first MiB and the two far magics. That second read
 * does not wait for the tail: on an empty disk the tail (1.5 MiB) and the rest of the first MiB
 * (1 MiB) are then read at the same time instead of one after the other, and a formatted disk
 * (non-zero start) reads exactly what it read before. The answer is the same either way: a
 * non-zero tail still means 'unknown', whatever the rest holds.
 */
export async function readSignature(size: number, read: (r: Region) => Promise<Uint8Array>): Promise<Signature> {
  const clip = (offset: number, length: number): Region[] =>
    offset < size ? [{ offset, length: Math.min(length, size - offset) }] : [];
  const tailAt = Math.max(0, size - TAIL_BYTES);
  const startRead = read({ offset: 0, length: Math.min(size, START_BYTES) });
  const tailRead = read({ offset: tailAt, length: size - tailAt });
  const restRead = startRead.then((start) =>
    isZero(start)
      ? Promise.all([...clip(START_BYTES, MiB + 4096 - START_BYTES), ...clip(2 * MiB, 4096)].map(read))
      : undefined,
  );
  const [start, tail, rest] = await Promise.all([startRead, tailRead, restRead]);
  if (!isZero(tail)) return { kind: 'unknown' };
  if (!rest) return classifyFilesystem(start);
  return rest.every(isZero) ? { kind: 'empty' } : { kind: 'unknown' };
}

/** ext4 or xfs, exactly as blkid would name it, from the first START_BYTES of a disk with a zero tail. */
export function classifyFilesystem(start: Uint8Array): Signature {
  // ext4 leaves its first 1024 bytes (the boot block: where an MBR, a GPT's protective MBR, a
  // LUKS, xfs or md 1.1 header or an LVM label would be) zero, and mkfs.ext4 zeroes them.
  if (extType(start) === 'ext4' && isZero(start.subarray(0, EXT_SB)) && !foreignInExtArea(start)) {
    return { kind: 'fs', fsType: 'ext4' };
  }
  if (isXfs(start) && !foreignInXfsArea(start)) return { kind: 'fs', fsType: 'xfs' };
  return { kind: 'unknown' };
}

/**
 * Signatures blkid finds at offsets inside the area an ext4 or xfs filesystem itself occupies,
 * which a leftover from an earlier use (mkswap, mkfs.btrfs, mdadm, make-bcache) or a
 * hand-made second header could still carry. Any of them sends the disk to blkid.
 */
const FOREIGN: readonly { at: number; magic: Buffer }[] = [
  // swap and suspend images: the magic ends the first page (4 KiB … 64 KiB pages).
  ...[4096, 8192, 16384, 32768, 65536].flatMap((page) =>
    ['SWAP-SPACE', 'SWAPSPACE2', 'S1SUSPEND', 'S2SUSPEND', 'ULSUSPEND', 'LINHIB0001'].map((m) => ({
      at: page - 10,
      magic: Buffer.from(m, 'latin1'),
    })),
  ),
  { at: 64 * 1024 + 0x40, magic: Buffer.from('_BHRfS_M', 'latin1') }, // btrfs
  { at: 0x1000, magic: Buffer.from([0xfc, 0x4e, 0x2b, 0xa9]) }, // md 1.2 superblock (le32 0xa92b4efc)
  { at: 0x1000 + 24, magic: Buffer.from('c68573f64e1a45ca8265f57f48ba6d81', 'hex') }, // bcache
  { at: 0, magic: Buffer.from([0x4c, 0x55, 0x4b, 0x53, 0xba, 0xbe]) }, // LUKS
  { at: 510, magic: Buffer.from([0x55, 0xaa]) }, // MBR / protective MBR of a GPT
  { at: 512, magic: Buffer.from('EFI PART', 'latin1') }, // GPT header
];

const has = (head: Uint8Array, at: number, magic: Buffer) =>
  at + magic.length <= head.length && Buffer.from(head.buffer, head.byteOffset + at, magic.length).equals(magic);

function foreignInExtArea(head: Uint8Array): boolean {
  return FOREIGN.some((f) => has(head, f.at, f.magic));
}

function foreignInXfsArea(head: Uint8Array): boolean {
  // The xfs superblock fills sector 0 from byte 0, so a header at 0 (LUKS) cannot be there too.
  return FOREIGN.some((f) => f.at !== 0 && has(head, f.at, f.magic)) || extType(head) !== undefined;
}
