// Sparse files standing in for LVM-thin logical volumes: allocation costs no disk space until the
// guest writes, just like a thin LV.

import { mkdir, open, rm, stat, truncate } from 'node:fs/promises';
import { dirname, join } from 'node:path';
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
}
