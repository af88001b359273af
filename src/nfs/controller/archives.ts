// Finding archived claim directories (what DeleteVolume's archive policy leaves, policy.ts) and
// their age and size, for `report` and `archives`. Names, as the drivers make them:
//   csi-driver-nfs:  archived-<subDir>                   e.g. archived-<ns>/<pvc> (no time in it)
//   this driver:     archived-<subDir>, and when taken   archived-<subDir>-<UTC stamp>[-n]
// So an archive is a directory `depth` levels down (depth = the segments of the class's subDir,
// 2 for <namespace>/<pvc>, 1 for the default <pv name>) whose first segment starts with
// "archived-". Its time is the stamp in its name, else the later of its mtime and ctime (the
// rename that archived it set ctime; an upstream archive carries no other record of the time):
// never older than the archive really is, so a prune never removes one too early.
import { isCsiError } from '../../errors.js';
import type { NfsStore, OpOptions } from './store/store.js';
import { mapLimit } from '../../map-limit.js';

export const ARCHIVE_PREFIX = 'archived-';
const STAMP_RE = /-(?<y>\d{4})(?<mo>\d{2})(?<d>\d{2})T(?<h>\d{2})(?<mi>\d{2})(?<s>\d{2})Z(?:-\d+)?$/;

/** The time a name of ours records (…-20260131T235959Z[-n]), or undefined. */
export function archiveStampOf(path: string): number | undefined {
  const g = STAMP_RE.exec(path)?.groups;
  if (!g) return undefined;
  const n = (k: string) => Number(g[k]);
  const t = Date.UTC(n('y'), n('mo') - 1, n('d'), n('h'), n('mi'), n('s'));
  return Number.isNaN(t) ? undefined : t;
}

export const isArchivePath = (path: string): boolean => {
  const first = path.split('/')[0] ?? '';
  return first.startsWith(ARCHIVE_PREFIX) && first.length > ARCHIVE_PREFIX.length;
};

export interface Archive {
  /** Relative to the share, e.g. archived-media/config. */
  path: string;
  /** What it was: the claim directory the name says (archived- and any time suffix removed). */
  original: string;
  /** ms since the epoch. */
  archivedAt: number;
  /** Where archivedAt comes from. */
  timeFrom: 'name' | 'times';
  /** Bytes of the files below it (apparent size), when measured. */
  sizeBytes?: number;
}

export function originalOf(path: string): string {
  return path.slice(ARCHIVE_PREFIX.length).replace(STAMP_RE, '');
}

/** Directories exactly `depth` levels below `base` (or the share root), following no symlinks. */
export async function dirsAtDepth(
  store: NfsStore,
  depth: number,
  filter: (name: string, level: number) => boolean,
  o: OpOptions = {},
): Promise<string[]> {
  let level: string[] = [''];
  for (let d = 0; d < depth; d++) {
    const next: string[][] = await mapLimit(level, 8, async (dir) => {
      let entries;
      try {
        entries = await store.list(dir, o);
      } catch (e) {
        if (isCsiError(e, 'NotFound')) return [];
        throw e;
      }
      return entries
        .filter((e) => e.type === 'dir' && filter(e.name, d))
        .map((e) => (dir ? `${dir}/${e.name}` : e.name));
    });
    level = next.flat();
  }
  return level.sort();
}

/** Sum of the sizes of the files below `path` (symlinks count as themselves, never followed). */
export async function treeSize(store: NfsStore, path: string, o: OpOptions = {}): Promise<number> {
  let entries;
  try {
    entries = await store.list(path, o);
  } catch (e) {
    if (isCsiError(e, 'NotFound')) return 0;
    throw e;
  }
  const sizes = await mapLimit(entries, 8, async (e) => {
    const p = `${path}/${e.name}`;
    if (e.type === 'dir') return treeSize(store, p, o);
    return (await store.stat(p, o))?.size ?? 0;
  });
  return sizes.reduce((a, b) => a + b, 0);
}

/** The archives of a share whose claims are `depth` levels deep. */
export async function findArchives(
  store: NfsStore,
  depth: number,
  o: OpOptions & { sizes?: boolean } = {},
): Promise<Archive[]> {
  const paths = await dirsAtDepth(
    store,
    depth,
    (name, level) => level > 0 || (name.startsWith(ARCHIVE_PREFIX) && name.length > ARCHIVE_PREFIX.length),
    o,
  );
  const out = await mapLimit(paths, 4, async (path): Promise<Archive | undefined> => {
    const stamp = archiveStampOf(path);
    let archivedAt = stamp;
    if (archivedAt === undefined) {
      const st = await store.stat(path, o);
      if (!st) return undefined;
      archivedAt = Math.max(st.mtimeMs ?? 0, st.ctimeMs ?? 0);
      if (archivedAt === 0) archivedAt = Date.now();
    }
    const sizeBytes = o.sizes === false ? undefined : await treeSize(store, path, o);
    return {
      path,
      original: originalOf(path),
      archivedAt,
      timeFrom: stamp !== undefined ? 'name' : 'times',
      ...(sizeBytes !== undefined && { sizeBytes }),
    };
  });
  return out.filter((a): a is Archive => a !== undefined);
}
