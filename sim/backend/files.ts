// Sparse files standing in for LVM-thin logical volumes: allocation costs no disk space until the
// guest writes, just like a thin LV.

import { mkdir, open, rename, rm, stat, truncate } from 'node:fs/promises';

const CHUNK = 1024 * 1024;
import { dirname, join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);
import type { FileStore } from './types.js';

export class SparseFiles implements FileStore {
  constructor(private readonly root: string) {}

  pathFor(node: string, storage: string, volname: string): string {
    return join(this.root, node, storage, `${volname}.raw`);
  }

  async create(path: string, sizeBytes: number): Promise<void> {
    await mkdir(dirname(path), { recursive: true });
    const fh = await open(path, 'w');
    try {
      await fh.truncate(sizeBytes);
    } finally {
      await fh.close();
    }
  }

  async resize(path: string, sizeBytes: number): Promise<void> {
    await truncate(path, sizeBytes);
  }

  async remove(path: string): Promise<void> {
    await rm(path, { force: true });
  }

  async allocatedBytes(path: string): Promise<number> {
    try {
      return (await stat(path)).blocks * 512;
    } catch {
      return 0;
    }
  }

  async write(path: string, offset: number, bytes: number): Promise<void> {
    const fh = await open(path, 'r+');
    try {
      const buf = Buffer.alloc(Math.min(CHUNK, bytes), 0xa5);
      for (let done = 0; done < bytes;) {
        const n = Math.min(buf.length, bytes - done);
        await fh.write(buf, 0, n, offset + done);
        done += n;
      }
      await fh.sync();
    } finally {
      await fh.close();
    }
  }

  async copy(from: string, to: string, sizeBytes: number, failAfterBytes?: number): Promise<void> {
    await this.create(to, sizeBytes);
    const src = await open(from, 'r');
    const dst = await open(to, 'r+');
    try {
      const buf = Buffer.alloc(CHUNK);
      for (let off = 0; off < sizeBytes; off += CHUNK) {
        if (failAfterBytes !== undefined && off >= failAfterBytes) {
          throw new Error(`broken pipe after ${off} bytes`);
        }
        const { bytesRead } = await src.read(buf, 0, Math.min(CHUNK, sizeBytes - off), off);
        if (bytesRead === 0) break;
        const chunk = buf.subarray(0, bytesRead);
        // skip all-zero chunks: the target stays sparse like a thin LV written by dd conv=sparse
        if (chunk.some((b) => b !== 0)) await dst.write(chunk, 0, bytesRead, off);
      }
      await dst.sync();
    } finally {
      await src.close();
      await dst.close();
    }
  }

  async snapshot(from: string, to: string): Promise<void> {
    await mkdir(dirname(to), { recursive: true });
    // GNU cp: a reflink where the filesystem has them (btrfs, xfs), else SEEK_DATA/SEEK_HOLE so a
    // thin 100 GiB volume with 1 MiB written costs 1 MiB and milliseconds, like an LVM-thin snapshot
    await run('cp', ['--reflink=auto', '--sparse=always', from, to]);
  }

  async rename(from: string, to: string): Promise<void> {
    await mkdir(dirname(to), { recursive: true });
    await rename(from, to);
  }
}
