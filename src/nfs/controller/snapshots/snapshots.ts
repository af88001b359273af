// NFS snapshots: a full copy of the claim directory, made over the controller's own NFS client
// (copy-tree.ts), kept on the claim's share outside every claim so it outlives the claim under
// every onDelete policy. Layout below the share (docs/snapshots.md, NFS):
//   .snapshots/<name>/tree/                                      the snapshot's tree
//   .snapshots/<name>/v1,<created ms>,<bytes>,<source handle>    empty: the completion record
//   .snapshots/.restore-<claim path>@<CSI volume name>@<source>  empty: a restore or clone under way
//   .snapshots/.filled-<claim path>@<CSI volume name>            empty: that request filled the claim
// (the two records: fill-records.ts).
// <name> and the handle are URI-encoded so any CSI name is one directory entry. The record is
// made last, so a snapshot with one is complete; one without is what a killed copy left, and the
// next attempt removes and copies again. Nothing copied is renamed afterwards: the gate's
// boundary walk before a rename reads every directory, which would move their atimes.
import type { Logger } from 'pino';
import { AlreadyExists, FailedPrecondition, Internal, InvalidArgument, isCsiError, NotFound } from '../../../errors.js';
import type * as T from '../../../csi/types.js';
import type { NfsStore, NfsStores, OpOptions } from '../store/store.js';
import { composeSnapshotId } from '../../snapshot-id.js';
import { type CopyProgress, trackedCopy } from '../copy/copy-progress.js';

export const SNAPSHOTS = '.snapshots';
const TREE = 'tree';
const DATA_RE = /^v1,(\d+),(\d+),(.+)$/;
/** Room left in a 255-byte entry name for the encoded source handle. */
export const MAX_ENTRY = 255;

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
    if (!m || e.type !== 'dir' || !entries.some((t) => t.name === TREE && t.type === 'dir')) continue;
    return {
      server: store.server,
      share: store.share,
      name,
      createdMs: Number(m[1]),
      sizeBytes: Number(m[2]),
      sourceVolumeId: decodeURIComponent(m[3] ?? ''),
      dataPath: `${dir}/${TREE}`,
    };
  }
  return null;
}

/**
 * DeleteSnapshot of one of ours: only a folder holding its completion record is a snapshot, and
 * the record goes last (the tree first), so a delete killed at any step leaves a folder its retry
 * still recognises. Answers whether anything was removed.
 */
export async function removeSnapshot(store: NfsStore, name: string, o: OpOptions): Promise<boolean> {
  const dir = snapshotDirOf(name);
  let entries;
  try {
    entries = await store.list(dir, o);
  } catch (e) {
    if (isCsiError(e, 'NotFound')) return false;
    throw e;
  }
  if (!entries.some((e) => DATA_RE.test(e.name) && e.type === 'dir')) return false;
  if (entries.some((e) => e.name === TREE)) await store.removeTree(`${dir}/${TREE}`, o);
  return store.removeTree(dir, o);
}

/**
 * Refuses a share whose snapshot store is not a directory (a file, a symlink: made by hand), before
 * a DeleteVolume changes anything: its records could not be read or removed after the claim went.
 */
export async function usableSnapshotStore(store: NfsStore, o: OpOptions): Promise<boolean> {
  const st = await store.stat(SNAPSHOTS, o);
  if (st && st.type !== 'dir')
    throw new FailedPrecondition(
      `${store.server}:${store.share}/${SNAPSHOTS} is a ${st.type}, not the directory where the driver keeps ` +
        'snapshots and restore records; nothing was changed: move it away (the driver makes the directory again)',
    );
  return st !== null;
}

/** The entries of a share's snapshot directory; none when the share has none yet. */
export async function snapshotsDirEntries(store: NfsStore, o: OpOptions): ReturnType<NfsStore['list']> {
  try {
    return await store.list(SNAPSHOTS, o);
  } catch (e) {
    if (isCsiError(e, 'NotFound')) return [];
    throw e;
  }
}

/** The snapshots of a share (complete ones; temporaries are for `report`). */
export async function listShareSnapshots(store: NfsStore, o: OpOptions): Promise<NfsSnapshot[]> {
  const entries = await snapshotsDirEntries(store, o);
  const out: NfsSnapshot[] = [];
  for (const e of entries) {
    if (e.type !== 'dir' || e.name.startsWith('.')) continue;
    const s = await findSnapshot(store, decodeURIComponent(e.name), o);
    if (s) out.push(s);
  }
  return out;
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

/** CreateSnapshot on the source's share; an existing snapshot of that name is answered or refused. */
export async function createSnapshot(
  stores: NfsStores,
  src: { id: string; server: string; share: string; subDir: string },
  name: string,
  ctx: { log: Logger; signal: AbortSignal },
  now: () => Date,
  copies?: CopyProgress,
): Promise<NfsSnapshot> {
  const store = stores.open(src.server, src.share);
  const o = { signal: ctx.signal };
  const dir = snapshotDirOf(name);
  const existing = await findSnapshot(store, name, o);
  if (existing) return sameSource(existing, src.id);
  const st = await store.stat(src.subDir, o);
  if (!st || st.type !== 'dir') throw new NotFound(`source volume ${src.id}: its directory does not exist`);
  const created = now().getTime();
  const what = { snapshot: name, source: src.id, to: `${store.server}:${store.share}/${dir}` };
  const t0 = Date.now();
  await store.removeTree(dir, o); // a killed attempt's copy: no completion record
  const stats = await trackedCopy(copies, ctx.log, { kind: 'snapshot', server: store.server, name }, what, (progress) =>
    store.copyTree(src.subDir, `${dir}/${TREE}`, { ...o, progress }),
  );
  await store.ensureDir(`${dir}/${dataName(created, stats.bytes, src.id)}`, { mode: 0o755 }, o);
  ctx.log.info({ ...what, ...stats, ms: Date.now() - t0 }, 'NFS snapshot ready');
  const made = await findSnapshot(store, name, o);
  if (!made) throw new Internal(`snapshot "${name}" has no completion record right after it was written`);
  return sameSource(made, src.id);
}

function sameSource(s: NfsSnapshot, source: string): NfsSnapshot {
  if (s.sourceVolumeId !== source) {
    throw new AlreadyExists(`snapshot "${s.name}" already exists with source volume ${s.sourceVolumeId}`);
  }
  return s;
}
