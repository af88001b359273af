// A directory tree with everything a copy must keep (files of several chunks, empty files, nested
// and read-only directories, set-id and sticky modes, other owners, symlinks (relative,
// absolute, dangling), hard links across directories, a FIFO, exact atimes and mtimes), built on
// the export's local disk; and its description, read back on the local disk, to compare a copy
// with its source exactly.
import { createHash, randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';

const T0 = 1_600_000_000;

/** Builds the sample tree inside the existing directory `root`. */
export async function buildTree(root: string): Promise<void> {
  const p = (r: string) => path.join(root, r);
  await fs.mkdir(p('a/b/c'), { recursive: true });
  await fs.mkdir(p('sticky'));
  await fs.mkdir(p('readonly/inner'), { recursive: true });
  await fs.writeFile(p('big.bin'), randomBytes(300 * 1024 + 17));
  await fs.writeFile(p('empty'), '');
  await fs.writeFile(p('a/hello.txt'), 'hello\n');
  await fs.writeFile(p('a/b/c/deep.txt'), 'deep');
  await fs.writeFile(p('readonly/inner/x'), 'x');
  await fs.writeFile(p('suid'), '#!/bin/sh\n');
  await fs.writeFile(p('secret'), 'nobody reads me');
  await fs.link(p('a/hello.txt'), p('a/b/hello-link'));
  await fs.link(p('a/hello.txt'), p('sticky/hello-3'));
  await fs.symlink('../hello.txt', p('a/b/rel-link'));
  await fs.symlink('/etc/hostname', p('abs-link'));
  await fs.symlink('does/not/exist', p('dangling'));
  execFileSync('mkfifo', [p('a/fifo')]);
  const own: [string, number, number][] = [
    ['a', 1000, 1000],
    ['a/hello.txt', 1001, 2002],
    ['big.bin', 65534, 65534],
    ['suid', 0, 50],
    ['a/b/rel-link', 33, 33],
    ['a/fifo', 7, 8],
    ['readonly', 1234, 5678],
  ];
  for (const [r, u, g] of own) await fs.lchown(p(r), u, g);
  const modes: [string, number][] = [
    ['suid', 0o4755],
    ['a', 0o2770],
    ['sticky', 0o1777],
    ['secret', 0o000],
    ['a/fifo', 0o620],
    ['readonly/inner', 0o555],
    ['readonly', 0o500],
  ];
  for (const [r, m] of modes) await fs.chmod(p(r), m);
  // Times last, children before parents (adding entries sets a directory's mtime).
  const all = (await describeTree(root)).map((e) => e.path).reverse();
  for (const [i, r] of all.entries()) {
    const at = T0 + i * 7;
    execFileSync('touch', ['-h', '-d', `@${at}.${String(123456789 + i).padStart(9, '0')}`, p(r)]);
    execFileSync('touch', ['-h', '-a', '-d', `@${at - 86400}.000000${i}`, p(r)]);
  }
}

export interface EntryMeta {
  path: string;
  type: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  atimeNs: string;
  mtimeNs: string;
  /** sha256 of a file, target of a symlink. */
  content?: string;
  /** The other paths of a hard-linked file, sorted, itself included. */
  links?: string[];
}

function typeOf(s: import('node:fs').BigIntStats): string {
  if (s.isDirectory()) return 'dir';
  if (s.isSymbolicLink()) return 'symlink';
  if (s.isFIFO()) return 'fifo';
  if (s.isFile()) return 'file';
  return 'other';
}

const stamp = (ns: string) => `@${BigInt(ns) / 1_000_000_000n}.${String(BigInt(ns) % 1_000_000_000n).padStart(9, '0')}`;

/**
 * Puts back the atimes and mtimes `meta` recorded: reading a tree (describing it) moves the
 * atimes of what it read, so a source is described, put back, and only then copied.
 */
export function restoreTimes(root: string, meta: readonly EntryMeta[]): void {
  for (const e of meta) {
    const abs = path.join(root, e.path);
    execFileSync('touch', ['-h', '-m', '-d', stamp(e.mtimeNs), abs]);
    execFileSync('touch', ['-h', '-a', '-d', stamp(e.atimeNs), abs]);
  }
}

/**
 * Every entry below `root` (not `root` itself unless `withRoot`), sorted by path. Each entry's
 * attributes are read before its content or listing, so its atime is the one it had.
 */
export async function describeTree(root: string, withRoot = false): Promise<EntryMeta[]> {
  const out: EntryMeta[] = [];
  const inodes = new Map<bigint, string[]>();
  // Attributes of everything first, contents after: a file read once moves the atime all its
  // hard links show.
  const walk = async (rel: string) => {
    const abs = path.join(root, rel);
    const s = await fs.lstat(abs, { bigint: true });
    const type = typeOf(s);
    if (rel !== '' || withRoot) {
      out.push({
        path: rel,
        type,
        mode: Number(s.mode & 0o7777n),
        uid: Number(s.uid),
        gid: Number(s.gid),
        size: type === 'dir' ? 0 : Number(s.size),
        atimeNs: String(s.atimeNs),
        mtimeNs: String(s.mtimeNs),
      });
      if (type === 'file' && s.nlink > 1n) inodes.set(s.ino, [...(inodes.get(s.ino) ?? []), rel]);
    }
    if (type === 'dir') for (const n of (await fs.readdir(abs)).sort()) await walk(rel ? `${rel}/${n}` : n);
  };
  await walk('');
  for (const e of out) {
    const abs = path.join(root, e.path);
    if (e.type === 'file')
      e.content = createHash('sha256')
        .update(await fs.readFile(abs))
        .digest('hex');
    if (e.type === 'symlink') e.content = await fs.readlink(abs);
  }
  for (const group of inodes.values()) {
    if (group.length < 2) continue;
    for (const e of out) if (group.includes(e.path)) e.links = [...group].sort();
  }
  return out.sort((a, b) => a.path.localeCompare(b.path));
}

/**
 * The description without what nfs-ganesha cannot set: a symlink's atime and mtime (its VFS
 * backend answers SETATTR of a symlink's times with success and leaves them).
 */
export const settable = (meta: readonly EntryMeta[]): EntryMeta[] =>
  meta.map((e) => (e.type === 'symlink' ? { ...e, atimeNs: '-', mtimeNs: '-' } : e));
