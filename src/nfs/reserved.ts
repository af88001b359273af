// The names the NFS driver keeps for itself on a share, which no claim may be: the snapshot
// store `.snapshots` (snapshots, restore and filled records: controller/snapshots.ts) and the
// archives `archived-<first segment>` (controller/policy.ts). A class, a volume handle (either
// form) or a snapshot handle that names one of them, in its share or its claim path, names
// nothing the driver issued as a claim: CreateVolume refuses it before anything is read, the
// other RPCs answer it as an unknown id and change nothing. Matched without regard to case: a
// server on a case-insensitive file system finds `.Snapshots` at `.snapshots`.
const SNAPSHOT_STORE = '.snapshots';
const ARCHIVE_PREFIX = 'archived-';

const segments = (p: string) => p.split('/').filter((s) => s !== '');

/** Why this share and claim path name the driver's own folders, or null when they do not. */
export function reservedPath(share: string, subDir: string): string | null {
  const inShare = segments(share).find((s) => s.toLowerCase() === SNAPSHOT_STORE);
  if (inShare !== undefined)
    return `share "${share}" lies in "${inShare}", the folder where the driver keeps snapshots and restore records`;
  const segs = segments(subDir);
  const inSub = segs.find((s) => s.toLowerCase() === SNAPSHOT_STORE);
  if (inSub !== undefined)
    return `subDir "${subDir}" names "${inSub}", the folder where the driver keeps snapshots and restore records`;
  const first = segs[0] ?? '';
  if (first.toLowerCase().startsWith(ARCHIVE_PREFIX))
    return `subDir "${subDir}" begins with "${first}", the name onDelete: archive gives a claim it archives`;
  return null;
}
