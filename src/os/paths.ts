// Path helpers that never touch the last component of a path: on a dead NFS mount a stat of the
// mount point itself can fail or hang, while its parent lives on a local filesystem.
import { promises as fs } from 'node:fs';
import path from 'node:path';

/** Absolute path with the parent directory resolved through symlinks; the last component as given. */
export async function canonicalPath(p: string): Promise<string> {
  const abs = path.resolve(p);
  if (abs === '/') return abs;
  try {
    const parent = await fs.realpath(path.dirname(abs));
    return path.join(parent, path.basename(abs));
  } catch {
    return abs;
  }
}

export function isErrno(e: unknown, ...codes: string[]): boolean {
  return typeof e === 'object' && e !== null && codes.includes((e as NodeJS.ErrnoException).code ?? '');
}

/** mkdir -p; an existing directory is fine. */
export async function ensureDir(p: string, mode = 0o750): Promise<void> {
  await fs.mkdir(p, { recursive: true, mode });
}

/** Create an empty regular file (a bind-mount target for a block device) and its parents. */
export async function ensureFile(p: string, mode = 0o640): Promise<void> {
  await fs.mkdir(path.dirname(p), { recursive: true, mode: 0o750 });
  const handle = await fs.open(p, 'a', mode);
  await handle.close();
}
