// NFS snapshots: a full copy of the claim directory, made over the controller's own NFS client
// (copy-tree.ts), kept on the claim's share outside every claim so it outlives the claim under
// every onDelete policy. Layout below the share (docs/snapshots.md, NFS):
//   .snapshots/<name>/v1,<created ms>,<bytes>,<source volume handle>/   the snapshot's tree
//   .snapshots/.tmp-<name>/                                          a snapshot being copied
//   .snapshots/.restore-<claim path>/                                a restore or clone being copied
// <name> and the handle are URI-encoded so any CSI name is one directory entry. A copy lands under
// a temporary name and is renamed into place last: a snapshot that exists is complete, and what a
// killed copy leaves is a `.tmp-` or `.restore-` entry the next attempt replaces (and `report` lists).
import type { Logger } from 'pino';
import { AlreadyExists, Internal, InvalidArgument, isCsiError, NotFound } from '../../errors.js';
import type * as T from '../../csi/types.js';
import type { CopyStats } from './copy-tree.js';
import type { NfsStore, NfsStores, OpOptions } from './store.js';
import { composeSnapshotId } from '../snapshot-id.js';

export const SNAPSHOTS = '.snapshots';
export const TMP_PREFIX = '.tmp-';
export const RESTORE_PREFIX = '.restore-';
const DATA_RE = /^v1,(\d+),(\d+),(.+)$/;
/** Room left in a 255-byte entry name for the encoded source handle. */
const MAX_ENTRY = 255;

export interface NfsSnapshot {
  server: string;
  share: string;
  name: string;
  sourceVolumeId: string;
  createdMs: number;
  sizeBytes: number;
  /** Share-relative path of the snapshot's tree. */
  dataPath: string;
}

const enc = (s: string) => encodeURIComponent(s).replace(/^\./, '%2E');

export function snapshotDirOf(name: string): string {
  const e = enc(name);
  if (name.includes('#') || Buffer.byteLength(e) > 200) {
    throw new InvalidArgument(`snapshot name "${name}" cannot be stored: at most 200 bytes encoded and no '#'`);
  }
  return `${SNAPSHOTS}/${e}`;
}

function dataName(createdMs: number, bytes: number, source: string): string {
  const n = `v1,${createdMs},${bytes},${enc(source)}`;
  if (Buffer.byteLength(n) > MAX_ENTRY) {
    throw new InvalidArgument(`source volume handle "${source}" is too long to record with an NFS snapshot`);
  }
  return n;
}

/** The snapshot `name` on a share, or null when it does not exist (complete). */
export async function findSnapshot(store: NfsStore, name: string, o: OpOptions): Promise<NfsSnapshot | null> {
  const dir = snapshotDirOf(name);
  let entries;
  try {
    entries = await store.list(dir, o);
  } catch (e) {
    if (isCsiError(e, 'NotFound')) return null;
    throw e;
  }
  for (const e of entries) {
    const m = DATA_RE.exec(e.name);
    if (!m || e.type !== 'dir') continue;
    return {
      server: store.server,
      share: store.share,
      name,
      createdMs: Number(m[1]),
      sizeBytes: Number(m[2]),
      sourceVolumeId: decodeURIComponent(m[3] ?? ''),
      dataPath: `${dir}/${e.name}`,
    };
  }
  return null;
}

/** The snapshots of a share (complete ones; temporaries are for `report`). */
export async function listShareSnapshots(store: NfsStore, o: OpOptions): Promise<NfsSnapshot[]> {
  let entries;
  try {
    entries = await store.list(SNAPSHOTS, o);
  } catch (e) {
    if (isCsiError(e, 'NotFound')) return [];
    throw e;
  }
  const out: NfsSnapshot[] = [];
  for (const e of entries) {
    if (e.type !== 'dir' || e.name.startsWith('.')) continue;
    const s = await findSnapshot(store, decodeURIComponent(e.name), o);
    if (s) out.push(s);
  }
  return out;
}

/** Entries a killed copy left: `.tmp-` snapshots and `.restore-` claims, share-relative. */
export async function leftoverCopies(store: NfsStore, o: OpOptions): Promise<string[]> {
  try {
    const entries = await store.list(SNAPSHOTS, o);
    return entries
      .filter((e) => e.name.startsWith(TMP_PREFIX) || e.name.startsWith(RESTORE_PREFIX))
      .map((e) => `${SNAPSHOTS}/${e.name}`);
  } catch (e) {
    if (isCsiError(e, 'NotFound')) return [];
    throw e;
  }
}

export function csiSnapshot(s: NfsSnapshot): T.Snapshot {
  return {
    snapshotId: composeSnapshotId(s),
    sourceVolumeId: s.sourceVolumeId,
    sizeBytes: s.sizeBytes,
    creationTime: { seconds: Math.floor(s.createdMs / 1000), nanos: (s.createdMs % 1000) * 1e6 },
    readyToUse: true,
  };
}

/** Progress of a copy in the log: every few seconds, and the totals at the end. */
export function progressLog(log: Logger, what: Record<string, unknown>): (s: CopyStats) => void {
  return (s) => log.info({ ...what, ...s }, 'NFS copy progress');
}

/**
 * Copies `from` to `to` through a temporary entry under snapshots/ and renames it into place
 * last. A temporary left by an earlier, killed attempt is removed first.
 */
export async function copyIntoPlace(
  store: NfsStore,
  from: string,
  tmp: string,
  to: string,
  o: OpOptions & { progress?: (s: CopyStats) => void },
): Promise<CopyStats> {
  await store.removeTree(tmp, o);
  const stats = await store.copyTree(from, tmp, o);
  await store.rename(tmp, to, o);
  return stats;
}

/** CreateSnapshot on the source's share; an existing snapshot of that name is answered or refused. */
export async function createSnapshot(
  stores: NfsStores,
  src: { id: string; server: string; share: string; subDir: string },
  name: string,
  ctx: { log: Logger; signal: AbortSignal },
  now: () => Date,
): Promise<NfsSnapshot> {
  const store = stores.open(src.server, src.share);
  const o = { signal: ctx.signal };
  const dir = snapshotDirOf(name);
  const existing = await findSnapshot(store, name, o);
  if (existing) return sameSource(existing, src.id);
  const st = await store.stat(src.subDir, o);
  if (!st || st.type !== 'dir') throw new NotFound(`source volume ${src.id}: its directory does not exist`);
  const created = now().getTime();
  const tmp = `${SNAPSHOTS}/${TMP_PREFIX}${dir.slice(SNAPSHOTS.length + 1)}`;
  const what = { snapshot: name, source: src.id, to: `${store.server}:${store.share}/${dir}` };
  const t0 = Date.now();
  await store.removeTree(tmp, o);
  const stats = await store.copyTree(src.subDir, `${tmp}/partial`, { ...o, progress: progressLog(ctx.log, what) });
  await store.rename(`${tmp}/partial`, `${tmp}/${dataName(created, stats.bytes, src.id)}`, o);
  try {
    await store.rename(tmp, dir, o);
  } catch (e) {
    if (!isCsiError(e, 'AlreadyExists')) throw e;
    await store.removeTree(tmp, o); // another attempt finished first: answer with its snapshot
    const other = await findSnapshot(store, name, o);
    if (!other) throw e;
    return sameSource(other, src.id);
  }
  ctx.log.info({ ...what, ...stats, ms: Date.now() - t0 }, 'NFS snapshot ready');
  const made = await findSnapshot(store, name, o);
  if (!made) throw new Internal(`snapshot "${name}" is gone right after it was renamed into place`);
  return made;
}

function sameSource(s: NfsSnapshot, source: string): NfsSnapshot {
  if (s.sourceVolumeId !== source) {
    throw new AlreadyExists(`snapshot "${s.name}" already exists with source volume ${s.sourceVolumeId}`);
  }
  return s;
}
