// What a workload writes into a claim and reads back, for the snapshot, restore and clone
// scenarios. There is no kubelet here, so the test writes where the workload's writes land: for
// a Proxmox disk, the attached disk as the node sees it (the simulator's loop device, linked
// under the VM's /dev/disk/by-id name from the VolumeAttachment); for an NFS volume, its
// directory on the export. What is compared is everything a restore must keep: the bytes of a
// disk; the tree of a directory with modes, owners, timestamps, symlinks and hard links.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { PUBLISH_CONTEXT_DEVICE_PATH } from '../../../src/proxmox/contract.js';
import type { Env } from './env.js';
import { APPS, attachmentOf } from './workload.js';
import type { PersistentVolume } from './objects.js';

const MiB = 2 ** 20;

/** The attached disk of `pv` on `node`, once its VolumeAttachment says attached. */
export async function attachedDevice(
  env: Env,
  pv: PersistentVolume,
  node: string,
  timeoutMs = 60_000,
): Promise<string> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const va = await attachmentOf(env, pv.metadata.name, node);
    const devicePath = va?.status?.attached ? va.status.attachmentMetadata?.[PUBLISH_CONTEXT_DEVICE_PATH] : undefined;
    if (devicePath) {
      const dev = path.join(env.loopLinkDir, node, path.basename(devicePath));
      if (fs.existsSync(dev)) return dev;
    }
    if (Date.now() > end)
      throw new Error(
        `${pv.metadata.name} is not attached to ${node} (${JSON.stringify(va?.status)})\n${env.sidecarErrors()}`,
      );
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Regions of a disk a workload writes: its start and a stretch near its end (1 MiB each). */
export const DISK_REGIONS = (size: number) => [0, size - 2 * MiB];

/** Writes `seed`-derived random bytes at each region of the device and syncs it. */
export function writeDisk(dev: string, size: number, seed: string): void {
  const fd = fs.openSync(dev, 'r+');
  try {
    for (const [i, at] of DISK_REGIONS(size).entries()) fs.writeSync(fd, pattern(`${seed}/${i}`), 0, MiB, at);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** sha256 of each written region, plus one never written (must read as zeros). */
export function readDisk(dev: string, size: number): string[] {
  const fd = fs.openSync(dev, 'r');
  try {
    const buf = Buffer.alloc(MiB);
    return [...DISK_REGIONS(size), size / 2].map((at) => {
      const n = fs.readSync(fd, buf, 0, MiB, at);
      return crypto.createHash('sha256').update(buf.subarray(0, n)).digest('hex');
    });
  } finally {
    fs.closeSync(fd);
  }
}

/** What readDisk returns for a disk written by writeDisk(seed). */
export function expectedDisk(size: number, seed: string): string[] {
  const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');
  return [...DISK_REGIONS(size).map((_, i) => sha(pattern(`${seed}/${i}`))), sha(Buffer.alloc(MiB))];
}

function pattern(seed: string): Buffer {
  const out = Buffer.alloc(MiB);
  let block = crypto.createHash('sha256').update(seed).digest();
  for (let off = 0; off < MiB; off += block.length) {
    block.copy(out, off);
    block = crypto.createHash('sha256').update(block).digest();
  }
  return out;
}

/** The directory of an NFS claim of the seed's class (subDir `<namespace>/<pvc>` under `talos`). */
export const nfsDir = (env: Env, pvc: string) => path.join(env.nfs.exportDir, 'talos', APPS, pvc);

/** A day in 2025, so a copy that stamps "now" shows. */
const PAST = new Date('2025-03-01T10:00:00Z');

/**
 * A small application's tree: files of several sizes and modes, another owner, a private
 * subdirectory, a symlink, a hard link pair, an empty file, all with past timestamps.
 */
export function writeTree(dir: string, seed: string): void {
  const file = (rel: string, body: Buffer | string, mode: number, owner?: [number, number]) => {
    const p = path.join(dir, rel);
    fs.writeFileSync(p, body);
    fs.chmodSync(p, mode);
    if (owner) fs.chownSync(p, ...owner);
  };
  // The volume's own root too: an application's data directory (owner and mode matter to it).
  fs.chmodSync(dir, 0o750);
  fs.chownSync(dir, 1000, 1000);
  fs.mkdirSync(path.join(dir, 'db'), { recursive: true });
  fs.chmodSync(path.join(dir, 'db'), 0o700);
  fs.chownSync(path.join(dir, 'db'), 999, 999);
  file('db/data.bin', pattern(seed), 0o600, [999, 999]);
  file('db/wal.log', `${seed}\n`.repeat(1000), 0o640, [999, 999]);
  file('config.yaml', `seed: ${seed}\n`, 0o644);
  file('empty', '', 0o444, [1000, 2000]);
  file('run.sh', '#!/bin/sh\necho hi\n', 0o755);
  fs.linkSync(path.join(dir, 'config.yaml'), path.join(dir, 'config.hardlink'));
  fs.symlinkSync('db/data.bin', path.join(dir, 'current'));
  for (const rel of ['db/data.bin', 'db/wal.log', 'config.yaml', 'empty', 'run.sh', 'db', '.'])
    fs.utimesSync(path.join(dir, rel), PAST, PAST);
}

/** Changes a tree after its snapshot: what a restore of that snapshot must not show. */
export function changeTree(dir: string): void {
  fs.appendFileSync(path.join(dir, 'db/wal.log'), 'after the snapshot\n');
  fs.rmSync(path.join(dir, 'run.sh'));
  fs.writeFileSync(path.join(dir, 'new-file'), 'written after the snapshot');
  fs.chmodSync(path.join(dir, 'config.yaml'), 0o600);
}

export interface Entry {
  path: string;
  type: 'file' | 'dir' | 'symlink';
  mode: string;
  uid: number;
  gid: number;
  mtime: number;
  size?: number;
  sha256?: string;
  target?: string;
  /** The first path (in order) of the hard-link group this entry belongs to. */
  hardLinkOf?: string;
}

/** Every entry under `dir` (itself included as "."), sorted by path. */
export function readTree(dir: string): Entry[] {
  const out: Entry[] = [];
  const inodes = new Map<number, string>();
  const walk = (rel: string) => {
    const p = path.join(dir, rel);
    const st = fs.lstatSync(p);
    const base = {
      path: rel,
      mode: (st.mode & 0o7777).toString(8),
      uid: st.uid,
      gid: st.gid,
      mtime: Math.floor(st.mtimeMs / 1000),
    };
    // A symlink's own times are left out: NFS servers (ganesha among them) ignore SETATTR of them.
    if (st.isSymbolicLink()) out.push({ ...base, mtime: 0, type: 'symlink', target: fs.readlinkSync(p) });
    else if (st.isDirectory()) {
      out.push({ ...base, type: 'dir' });
      for (const name of fs.readdirSync(p).sort()) walk(rel === '.' ? name : `${rel}/${name}`);
    } else {
      const first = st.nlink > 1 ? inodes.get(st.ino) : undefined;
      if (st.nlink > 1 && !first) inodes.set(st.ino, rel);
      const sha256 = crypto.createHash('sha256').update(fs.readFileSync(p)).digest('hex');
      out.push({ ...base, type: 'file', size: st.size, sha256, ...(first && { hardLinkOf: first }) });
    }
  };
  walk('.');
  return out;
}
