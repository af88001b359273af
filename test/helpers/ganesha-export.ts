// A private nfs-ganesha for one test file (test/integration/nfs/ganesha.ts), stopped on the
// test's teardown, and the export's `talos` directory as an NFS client names it and as it lies
// on the local disk, so a test checks what a call did on the directory itself.
import fs from 'node:fs/promises';
import path from 'node:path';
import { startGanesha, type Ganesha } from '../integration/nfs/ganesha.js';
import type { Teardown } from './teardown.js';

export interface TalosExport {
  g: Ganesha;
  /** `<share>/talos`: the directory the driver's volumes go in, as clients name it. */
  talos: string;
  /** A path below `talos` on the local disk. */
  onDisk: (p: string) => string;
  /** Permission bits (and set-id, sticky) of a path below `talos`, read on the local disk. */
  mode: (p: string) => Promise<number>;
}

export async function startTalosExport(t: Teardown, opts: { v4only?: boolean } = {}): Promise<TalosExport> {
  const g = await startGanesha(opts);
  t.teardown(() => g.stop());
  const onDisk = (p: string) => path.join(g.exportDir, 'talos', p);
  return {
    g,
    talos: `${g.share}/talos`,
    onDisk,
    mode: async (p) => (await fs.lstat(onDisk(p))).mode & 0o7777,
  };
}

/** The attributes ensureDir sets (times and size change with every call). */
export const ownership = (s: { type: string; mode: number; uid: number; gid: number } | null) =>
  s && { type: s.type, mode: s.mode, uid: s.uid, gid: s.gid };
