// NFS snapshots: a full copy of the claim directory, made over the controller's own NFS client
// (copy-tree.ts), kept on the claim's share outside every claim so it outlives the claim under
// every onDelete policy. Layout below the share (docs/snapshots.md, NFS):
//   .snapshots/<name>/tree/                                      the snapshot's tree
//   .snapshots/<name>/v1,<created ms>,<bytes>,<source handle>    empty: the completion record
//   .snapshots/.restore-<claim path>                             empty: a restore or clone under way
//   .snapshots/.filled-<claim path>@<CSI volume name>            empty: that request filled the claim
// <name> and the handle are URI-encoded so any CSI name is one directory entry. The record is
// made last, so a snapshot with one is complete; one without is what a killed copy left, and the
// next attempt removes and copies again. Nothing copied is renamed afterwards: the gate's
// boundary walk before a rename reads every directory, which would move their atimes.
import type { Logger } from 'pino';
import { AlreadyExists, Internal, InvalidArgument, isCsiError, NotFound } from '../../../errors.js';
import type * as T from '../../../csi/types.js';
import type { CopyStats } from '../copy/copy-tree.js';
import type { NfsStore, NfsStores, OpOptions } from '../store/store.js';
import { composeSnapshotId } from '../../snapshot-id.js';
import { type CopyProgress, trackedCopy } from '../copy/copy-progress.js';

export const SNAPSHOTS = '.snapshots';
const TREE = 'tree';
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

/** The record of a restore or clone into the claim `subDir` (share-relative), while it runs. */
export const restoreMarkerOf = (subDir: string): string =>
  `${SNAPSHOTS}/${RESTORE_PREFIX}${encodeURIComponent(subDir)}`;

export const FILLED_PREFIX = '.filled-';
/** The entry-name prefix of every filled record of the claim `subDir`, whatever request made it. */
export const filledPrefixOf = (subDir: string): string => `${FILLED_PREFIX}${encodeURIComponent(subDir)}@`;

/**
 * The record that the restore or clone of CSI volume `name` filled the claim `subDir` and was
 * answered: kept until DeleteVolume, so that a retry of the same request is answered with the
 * directory and nothing else ever is (encodeURIComponent leaves no '@' of its own).
 */
export function filledRecordOf(subDir: string, name: string): string {
  const entry = `${filledPrefixOf(subDir)}${encodeURIComponent(name)}`;
  if (Buffer.byteLength(entry) > MAX_ENTRY) {
    throw new InvalidArgument(
      `claim path "${subDir}" and volume name "${name}" are too long (${Buffer.byteLength(entry)} bytes encoded, at ` +
        `most ${MAX_ENTRY}) to record a restore or clone into them: use a shorter subDir`,
    );
  }
  return `${SNAPSHOTS}/${entry}`;
}

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

/** Progress of a copy in the log: every few seconds, and the totals at the end. */
/**
 * Fills the new claim `to` of CSI volume `name` with `fill` (a copy of a tree, an unpacked
 * archive). Two records under .snapshots/ say what the claim directory is: the restore record
 * while the fill runs (a claim with one is a killed attempt's: removed and filled again), then the
 * filled record of this request, kept until DeleteVolume. A claim directory with neither was not
 * made by this request (a directory kept by onDelete: retain, another claim's with the same
 * subDir): it is refused, never answered as restored and never overwritten.
 */
export async function fillIntoPlace(
  store: NfsStore,
  to: string,
  name: string,
  fill: () => Promise<CopyStats>,
  o: OpOptions,
): Promise<CopyStats | 'done'> {
  const marker = restoreMarkerOf(to);
  const filled = filledRecordOf(to, name);
  const target = await store.stat(to, o);
  if ((await store.stat(filled, o))?.type === 'dir') {
    if (target?.type === 'dir') {
      await store.removeDirIfEmpty(marker, o); // a kill between the two records
      return 'done';
    }
    // Its directory went (removed by hand): the record answers for nothing; fill again.
    await store.removeDirIfEmpty(filled, o);
  } else if (target && (await store.stat(marker, o))?.type !== 'dir') {
    throw new AlreadyExists(
      `${store.server}:${store.share}/${to} already exists and was not filled by this restore or clone ` +
        `(${name}); the driver never hands a claim a directory it did not fill from the content source. The ` +
        "class's subDir is not unique per claim: archive or remove the directory (onDelete: retain keeps it), or " +
        'put ${pv.metadata.name} in subDir',
    );
  }
  await store.ensureDir(marker, {}, o);
  await store.removeTree(to, o);
  const stats = await fill();
  await store.ensureDir(filled, {}, o);
  await store.removeDirIfEmpty(marker, o);
  return stats;
}

/** Removes the filled records of the claim `subDir` (DeleteVolume: the claim is gone or let go). */
export async function forgetFilled(store: NfsStore, subDir: string, o: OpOptions): Promise<void> {
  const prefix = filledPrefixOf(subDir);
  for (const e of await snapshotsDirEntries(store, o)) {
    if (e.name.startsWith(prefix)) await store.removeDirIfEmpty(`${SNAPSHOTS}/${e.name}`, o);
  }
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
