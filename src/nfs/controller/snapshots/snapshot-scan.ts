// Every snapshot directory of a share as `report` and `archives` see it: complete ones (with
// their completion record, snapshots.ts) and partial ones (a copy that never finished: no record).
// A partial one is only a leftover when nothing below it changed within a grace period, so its
// whole tree is walked for the latest mtime/ctime (a running copy sets ctime on every entry it
// makes or sets attributes on); partials are rare, a complete snapshot costs one listing.
// Symlinks are never followed: list() names their type and stat() does not resolve them.
import { isCsiError } from '../../../errors.js';
import { findSnapshot, snapshotDirOf, SNAPSHOTS, snapshotsDirEntries, type NfsSnapshot } from './snapshots.js';
import type { NfsStore, OpOptions } from '../store/store.js';
import { mapLimit } from '../../../map-limit.js';

export interface SnapshotDir {
  /** The CSI snapshot name (decoded). */
  name: string;
  /** Share-relative: .snapshots/<encoded name>. */
  dir: string;
  /** The snapshot, when its completion record is there. */
  complete?: NfsSnapshot;
  /** Partial: whether its name is one snapshotDirOf makes (else something else put it there). */
  ours?: boolean;
  /** Partial: the latest mtime/ctime of the directory and everything below it (ms). */
  changedAt?: number;
  /** Partial: bytes copied so far, when measured. */
  sizeBytes?: number;
}

const changed = (st: { mtimeMs?: number; ctimeMs?: number } | null) => Math.max(st?.mtimeMs ?? 0, st?.ctimeMs ?? 0);

/** Latest change time and apparent size of the tree at `path`. */
async function treeFacts(store: NfsStore, path: string, o: OpOptions): Promise<{ changedAt: number; bytes: number }> {
  const self = await store.stat(path, o);
  if (!self) return { changedAt: 0, bytes: 0 };
  if (self.type !== 'dir') return { changedAt: changed(self), bytes: self.type === 'file' ? (self.size ?? 0) : 0 };
  let entries;
  try {
    entries = await store.list(path, o);
  } catch (e) {
    if (isCsiError(e, 'NotFound')) return { changedAt: 0, bytes: 0 };
    throw e;
  }
  const below = await mapLimit(entries, 8, (e) => treeFacts(store, `${path}/${e.name}`, o));
  return below.reduce((a, b) => ({ changedAt: Math.max(a.changedAt, b.changedAt), bytes: a.bytes + b.bytes }), {
    changedAt: changed(self),
    bytes: 0,
  });
}

/** One snapshot directory, read now (undefined when it is gone or not a directory). */
export async function readSnapshotDir(
  store: NfsStore,
  entry: string,
  o: OpOptions & { sizes?: boolean },
): Promise<SnapshotDir | undefined> {
  const dir = `${SNAPSHOTS}/${entry}`;
  const name = decodedName(entry);
  const complete = name !== undefined ? await findSnapshot(store, name, o) : null;
  if (complete) return { name: complete.name, dir, complete };
  if ((await store.stat(dir, o))?.type !== 'dir') return undefined;
  const f = await treeFacts(store, dir, o);
  return {
    name: name ?? entry,
    dir,
    ours: name !== undefined,
    changedAt: f.changedAt,
    ...(o.sizes !== false && { sizeBytes: f.bytes }),
  };
}

/** The CSI name of an entry this driver could have made (it encodes back to the entry), else undefined. */
function decodedName(entry: string): string | undefined {
  try {
    const name = decodeURIComponent(entry);
    return snapshotDirOf(name) === `${SNAPSHOTS}/${entry}` ? name : undefined;
  } catch {
    return undefined;
  }
}

/** The snapshot directories of a share (restore records, the dot entries, are not snapshots). */
export async function scanShareSnapshots(store: NfsStore, o: OpOptions & { sizes?: boolean }): Promise<SnapshotDir[]> {
  const entries = await snapshotsDirEntries(store, o);
  const dirs = entries.filter((e) => e.type === 'dir' && !e.name.startsWith('.'));
  const out = await mapLimit(dirs, 4, (e) => readSnapshotDir(store, e.name, o));
  return out.filter((s): s is SnapshotDir => s !== undefined).sort((a, b) => a.dir.localeCompare(b.dir));
}
