// The two records of a restore or clone under .snapshots/ (docs/snapshots.md, NFS) and the fill
// they guard. Each names the exact request it was written for, and only that request may act on
// it: a record authorises nothing else, whoever wrote it (a killed restore of another claim, a
// user, an older release).
//   .restore-<claim path>@<CSI volume name>@<source digest>   while the fill runs
//   .filled-<claim path>@<CSI volume name>                     once it was answered
// The digest is the first 16 hex digits of SHA-256 over the content source's kind and id, so a
// repeat of the name with another source is not taken for the request that wrote the record.
import { createHash } from 'node:crypto';
import { AlreadyExists, InvalidArgument, isCsiError } from '../../../errors.js';
import type { CopyStats } from '../copy/copy-tree.js';
import type { NfsStore, OpOptions } from '../store/store.js';
import { MAX_ENTRY, SNAPSHOTS, snapshotsDirEntries } from './snapshots.js';

export const RESTORE_PREFIX = '.restore-';
export const FILLED_PREFIX = '.filled-';

/** The digest of a content source, as restore records carry it. */
export const sourceDigest = (source: string): string => createHash('sha256').update(source).digest('hex').slice(0, 16);

function fits(entry: string, subDir: string, name: string): string {
  if (Buffer.byteLength(entry) > MAX_ENTRY) {
    throw new InvalidArgument(
      `claim path "${subDir}" and volume name "${name}" are too long (${Buffer.byteLength(entry)} bytes encoded, at ` +
        `most ${MAX_ENTRY}) to record a restore or clone into them: use a shorter subDir`,
    );
  }
  return `${SNAPSHOTS}/${entry}`;
}

/** The record that the restore or clone of CSI volume `name` from `source` into `subDir` runs. */
export const restoreMarkerOf = (subDir: string, name: string, source: string): string =>
  fits(
    `${RESTORE_PREFIX}${encodeURIComponent(subDir)}@${encodeURIComponent(name)}@${sourceDigest(source)}`,
    subDir,
    name,
  );

/** The entry of an older release's restore record: it names the claim only, so it authorises nothing. */
export const legacyRestoreMarkerOf = (subDir: string): string => `${RESTORE_PREFIX}${encodeURIComponent(subDir)}`;

/** The entry-name prefix of every filled record of the claim `subDir`, whatever request made it. */
export const filledPrefixOf = (subDir: string): string => `${FILLED_PREFIX}${encodeURIComponent(subDir)}@`;

/**
 * The record that the restore or clone of CSI volume `name` filled the claim `subDir` and was
 * answered: kept until DeleteVolume, so that a retry of the same request is answered with the
 * directory and nothing else ever is (encodeURIComponent leaves no '@' of its own).
 */
export const filledRecordOf = (subDir: string, name: string): string =>
  fits(`${filledPrefixOf(subDir)}${encodeURIComponent(name)}`, subDir, name);

/**
 * Fills the new claim `to` of CSI volume `name` from `source` with `fill` (a copy of a tree, an
 * unpacked archive). The restore record of exactly this request marks the fill as running (a
 * claim with it is this request's killed attempt: emptied and filled again); the filled record
 * of this request, kept until DeleteVolume, answers a retry. A claim directory with neither was
 * not made by this request (a directory kept by onDelete: retain, another claim's with the same
 * subDir, one a plain CreateVolume adopted, one next to another request's or a forged record):
 * it is refused, never answered as restored and never emptied.
 */
export async function fillIntoPlace(
  store: NfsStore,
  to: string,
  req: { name: string; source: string },
  fill: () => Promise<CopyStats>,
  o: OpOptions,
): Promise<CopyStats | 'done'> {
  const marker = restoreMarkerOf(to, req.name, req.source);
  const filled = filledRecordOf(to, req.name);
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
        `(${req.name}); the driver never hands a claim a directory it did not fill from the content source. The ` +
        "class's subDir is not unique per claim: archive or remove the directory (onDelete: retain keeps it), or " +
        'put ${pv.metadata.name} in subDir',
    );
  }
  await store.ensureDir(marker, {}, o);
  await store.removeTree(to, o);
  let stats: CopyStats;
  try {
    stats = await fill();
  } catch (e) {
    // The source itself is refused (a hostile or broken archive, more data than the claim asked
    // for): the same on every retry, so nothing of the attempt is left behind.
    if (isCsiError(e, 'InvalidArgument') || isCsiError(e, 'OutOfRange')) {
      await store.removeTree(to, o);
      await store.removeDirIfEmpty(marker, o);
    }
    throw e;
  }
  await store.ensureDir(filled, {}, o);
  await store.removeDirIfEmpty(marker, o);
  return stats;
}

/** Removes the records under .snapshots/ whose entry name satisfies `which`. */
async function forget(store: NfsStore, which: (entry: string) => boolean, o: OpOptions): Promise<string[]> {
  const gone: string[] = [];
  if ((await store.stat(SNAPSHOTS, o))?.type !== 'dir') return gone; // none, or not the driver's store
  for (const e of await snapshotsDirEntries(store, o)) {
    if (which(e.name) && (await store.removeDirIfEmpty(`${SNAPSHOTS}/${e.name}`, o)) === 'removed') gone.push(e.name);
  }
  return gone;
}

/** Removes the filled records of the claim `subDir` (DeleteVolume: the claim is gone or let go). */
export function forgetFilled(store: NfsStore, subDir: string, o: OpOptions): Promise<string[]> {
  const prefix = filledPrefixOf(subDir);
  return forget(store, (e) => e.startsWith(prefix), o);
}

/**
 * Removes every restore record of the claim `subDir` (any request's, any release's): a plain
 * CreateVolume that takes the directory as it is. Left there, a record would let the request
 * that wrote it (a retry of a killed restore) empty the directory the new claim now uses.
 */
export function forgetRestores(store: NfsStore, subDir: string, o: OpOptions): Promise<string[]> {
  const legacy = legacyRestoreMarkerOf(subDir);
  return forget(store, (e) => e === legacy || e.startsWith(`${legacy}@`), o);
}
