// The restore records of a share (.snapshots/.restore-<claim>@<name>@<source> while a fill runs, and
// .snapshots/.filled-<claim>@<volume name> once it was answered: snapshots.ts) as `report` sees
// them, with the state of the claim each one names. A record exists while a restore or clone
// fills its claim; one a killed restore left stays until a CreateVolume of that claim runs again
// (which removes the partial claim and fills it again) — or forever, when the claim was given up.
// What is provably left over (docs/snapshots.md, "Day 2"): a record of this driver's name whose
// claim directory does not exist and that nothing touched within the grace period. Its claim
// existing proves nothing either way: a kill after the last byte and one in the middle leave the
// same record, and removing it next to a partial claim would make the next attempt answer that
// partial claim as complete.
import { isCsiError } from '../../../errors.js';
import { SNAPSHOTS, snapshotsDirEntries } from './snapshots.js';
import { FILLED_PREFIX, RESTORE_PREFIX, filledPrefixOf, legacyRestoreMarkerOf } from './fill-records.js';
import { pathSegments, type FileType, type NfsStore, type OpOptions } from '../store/store.js';
import { mapLimit } from '../../../map-limit.js';

export interface RestoreMarker {
  /** Share-relative: .snapshots/.restore-<encoded claim path>. */
  path: string;
  /** The claim it names (share-relative), when the entry is one this driver makes. */
  claim?: string;
  /**
   * A filled record (.snapshots/.filled-<claim>@<volume name>): the restore or clone finished and
   * was answered. Normal next to its claim; left over once the claim directory is gone.
   */
  filled: boolean;
  type: FileType;
  /** Entries inside it (the driver's record is an empty directory). */
  entries: number;
  /** Latest mtime/ctime of the record itself (ms); undefined when the server gives none. */
  changedAt?: number;
  /** What is at its claim's path: nothing, a directory, something else, or unreadable. */
  target: 'missing' | FileType | 'unknown';
}

/** The claim path a record entry names, when this driver would have made exactly that entry. */
export function claimOfMarker(entry: string): string | undefined {
  try {
    if (entry.startsWith(RESTORE_PREFIX)) {
      // <claim>@<volume name>@<source digest>, or an older release's <claim> alone.
      const [encClaim = '', encName, digest, ...more] = entry.slice(RESTORE_PREFIX.length).split('@');
      if (more.length > 0 || (encName !== undefined && (digest === undefined || !/^[0-9a-f]{16}$/.test(digest))))
        return undefined;
      const claim = decodeURIComponent(encClaim);
      pathSegments(claim);
      if (legacyRestoreMarkerOf(claim) !== `${RESTORE_PREFIX}${encClaim}`) return undefined;
      if (encName === undefined) return claim;
      const name = decodeURIComponent(encName);
      return name !== '' && encodeURIComponent(name) === encName ? claim : undefined;
    }
    if (entry.startsWith(FILLED_PREFIX)) {
      const [encClaim, encName, ...more] = entry.slice(FILLED_PREFIX.length).split('@');
      if (encClaim === undefined || encName === undefined || more.length > 0) return undefined;
      const claim = decodeURIComponent(encClaim);
      const name = decodeURIComponent(encName);
      pathSegments(claim);
      return name !== '' && `${filledPrefixOf(claim)}${encodeURIComponent(name)}` === entry ? claim : undefined;
    }
  } catch {
    // not an encoding the driver writes
  }
  return undefined;
}

/** One record, read now (undefined when it is gone). */
export async function readRestoreMarker(
  store: NfsStore,
  entry: string,
  o: OpOptions,
): Promise<RestoreMarker | undefined> {
  const path = `${SNAPSHOTS}/${entry}`;
  const st = await store.stat(path, o);
  if (!st) return undefined;
  const claim = claimOfMarker(entry);
  let entries = 0;
  if (st.type === 'dir') {
    try {
      entries = (await store.list(path, o)).length;
    } catch (e) {
      if (isCsiError(e, 'NotFound')) return undefined;
      throw e;
    }
  }
  let target: RestoreMarker['target'] = 'unknown';
  if (claim !== undefined) {
    try {
      target = (await store.stat(claim, o))?.type ?? 'missing';
    } catch {
      target = 'unknown'; // a parent that is a file, a server error: not provably missing
    }
  }
  const changedAt = Math.max(st.mtimeMs ?? 0, st.ctimeMs ?? 0) || undefined;
  return {
    path,
    ...(claim !== undefined && { claim }),
    filled: entry.startsWith(FILLED_PREFIX),
    type: st.type,
    entries,
    ...(changedAt !== undefined && { changedAt }),
    target,
  };
}

/** Every restore record of a share, sorted. */
export async function scanRestoreMarkers(store: NfsStore, o: OpOptions): Promise<RestoreMarker[]> {
  const entries = await snapshotsDirEntries(store, o);
  const found = entries.filter((e) => e.name.startsWith(RESTORE_PREFIX) || e.name.startsWith(FILLED_PREFIX));
  const out = await mapLimit(found, 4, (e) => readRestoreMarker(store, e.name, o));
  return out.filter((m): m is RestoreMarker => m !== undefined).sort((a, b) => a.path.localeCompare(b.path));
}
