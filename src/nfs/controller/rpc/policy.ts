// What DeleteVolume does to a volume's directory, per onDelete policy. Both functions are
// idempotent: a retry after a lost reply finds nothing left to do and succeeds.
import { Internal, isCsiError } from '../../../errors.js';
import type { NfsStore, OpOptions } from '../store/store.js';

const MAX_NAME_BYTES = 255;

/** Cuts `base` so that base + suffix fits in one directory entry (255 bytes). */
function fit(base: string, suffix: string): string {
  let b = base;
  while (b.length > 0 && Buffer.byteLength(b + suffix, 'utf8') > MAX_NAME_BYTES) b = b.slice(0, -1);
  return b + suffix;
}

/** archived-<subDir>: upstream prefixes the first segment, e.g. archived-<namespace>/<pvc>. */
export function archivePath(subDir: string): string {
  const [first = '', ...rest] = subDir.split('/');
  return [fit('archived-' + first, ''), ...rest].join('/');
}

/** UTC time without separators that are awkward in file names: 20260131T235959Z. */
export function stamp(d: Date): string {
  return d
    .toISOString()
    .replace(/\.\d+Z$/, 'Z')
    .replace(/[-:]/g, '');
}

function suffixed(path: string, suffix: string): string {
  const segs = path.split('/');
  const last = segs.pop() ?? ''; // split returns at least one segment
  return [...segs, fit(last, suffix)].join('/');
}

export type ArchiveOutcome = { archivedTo: string } | 'empty-removed' | 'missing';

/**
 * Renames the volume directory to archived-<subDir>. When that name is taken (an earlier claim
 * with the same name was archived), archives under archived-<subDir>-<UTC time>[-n] instead:
 * never fails on a collision and never replaces an archive. On a collision an empty directory
 * is removed instead: it holds nothing to keep, and it is most likely the directory of a
 * CreateVolume that came after the claim was archived (RMDIR is atomic: one written to meanwhile
 * stays and is archived). So an archive under a suffixed name always holds a claim's data.
 */
export async function archiveVolume(
  store: NfsStore,
  subDir: string,
  now: Date,
  o: OpOptions = {},
): Promise<ArchiveOutcome> {
  const base = archivePath(subDir);
  const candidates = [base, suffixed(base, `-${stamp(now)}`)];
  for (let n = 2; n <= 50; n++) candidates.push(suffixed(base, `-${stamp(now)}-${n}`));
  for (const [i, target] of candidates.entries()) {
    if (i === 1) {
      const rmdir = await store.removeDirIfEmpty(subDir, o);
      if (rmdir !== 'not-empty') return rmdir === 'removed' ? 'empty-removed' : 'missing';
    }
    try {
      await store.rename(subDir, target, o);
      return { archivedTo: target };
    } catch (e) {
      if (isCsiError(e, 'NotFound')) return 'missing';
      if (!isCsiError(e, 'AlreadyExists')) throw e;
    }
  }
  // 52 archives of one claim within one second would be needed to get here.
  throw new Internal(`could not find a free archive name for ${store.server}:${store.share}/${subDir}`);
}

/**
 * Removes the volume directory recursively, then its parents strictly below the share root as
 * long as they are empty (rmdir is atomic on the server: a parent that holds anything else,
 * such as another claim of the same namespace, stays). Resolves false when it was already gone.
 */
export async function deleteVolumeDir(store: NfsStore, subDir: string, o: OpOptions = {}): Promise<boolean> {
  const removed = await store.removeTree(subDir, o);
  const segs = subDir.split('/');
  for (segs.pop(); segs.length > 0; segs.pop()) {
    if ((await store.removeDirIfEmpty(segs.join('/'), o)) === 'not-empty') break;
  }
  return removed;
}
