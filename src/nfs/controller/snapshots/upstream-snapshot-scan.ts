// csi-driver-nfs's own snapshots on a share, as `report` and `archives` list them (information:
// this driver restores them, tar-unpack.ts; only DeleteSnapshot removes them). Upstream
// (pkg/nfs/controllerserver.go, CreateSnapshot) keeps a snapshot as one archive
// <baseDir>/<snapshot name>/<src>.tar.gz (.tar with compression off), baseDir being the
// snapshot class's `share` or else the source's share, <src> the source volume's uuid or subDir;
// its own validateSnapshot refuses a snapshot directory holding anything but that archive. So a
// directory right below a share holding only `<src>.tar.gz` and/or `<src>.tar` is read as one.
// The directories a PV uses (at or below them) and the provisioner's pvc-<uid> names are claims,
// not snapshot directories, and are not even listed.
import { ARCHIVE_PREFIX } from '../archives.js';
import type { NfsStore, OpOptions } from '../store/store.js';
import { mapLimit } from '../../../map-limit.js';

export interface UpstreamSnapshot {
  /** The snapshot's directory right below the share: the CSI snapshot name. */
  name: string;
  /** The archive's base name: the source volume's uuid or subDir. */
  src: string;
  /** Its archives (`<src>.tar.gz`, `<src>.tar`), with size and mtime when the server gives them. */
  archives: Array<{ name: string; sizeBytes?: number; mtimeMs?: number }>;
}

const PV_NAME = /^pvc-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ARCHIVE = /^(.+?)\.(tar\.gz|tar)$/;

/** The source name when `names` are exactly the archives of one source, else undefined. */
export function upstreamArchiveSource(names: readonly string[]): string | undefined {
  if (names.length === 0 || names.length > 2) return undefined;
  const srcs = new Set(names.map((n) => ARCHIVE.exec(n)?.[1]));
  const [src] = srcs;
  if (srcs.size !== 1 || src === undefined || src === '.' || src === '..' || src.includes('\0')) return undefined;
  return new Set(names).size === names.length ? src : undefined;
}

/** The handle csi-driver-nfs gave the snapshot (getSnapshotIDFromNfsSnapshot): restorable by this driver. */
export function upstreamSnapshotId(server: string, share: string, s: Pick<UpstreamSnapshot, 'name' | 'src'>): string {
  return [server, share.replace(/^\/+|\/+$/g, ''), s.name, s.name, s.src].join('#');
}

export async function scanUpstreamSnapshots(
  store: NfsStore,
  o: OpOptions & { skip?: (name: string) => boolean },
): Promise<UpstreamSnapshot[]> {
  const top = await store.list('', o);
  const candidates = top.filter(
    (e) =>
      e.type === 'dir' &&
      !e.name.startsWith('.') &&
      !e.name.startsWith(ARCHIVE_PREFIX) &&
      !PV_NAME.test(e.name) &&
      !o.skip?.(e.name),
  );
  const found = await mapLimit(candidates, 4, async (d) => {
    const inside = await store.list(d.name, o).catch(() => []);
    if (inside.some((e) => e.type !== 'file')) return undefined;
    const src = upstreamArchiveSource(inside.map((e) => e.name));
    if (src === undefined) return undefined;
    const archives = await mapLimit(inside, 2, async (e) => {
      const st = await store.stat(`${d.name}/${e.name}`, o);
      return {
        name: e.name,
        ...(st?.size !== undefined && { sizeBytes: st.size }),
        ...(st?.mtimeMs !== undefined && { mtimeMs: st.mtimeMs }),
      };
    });
    return { name: d.name, src, archives: archives.sort((a, b) => a.name.localeCompare(b.name)) };
  });
  return found.filter((s): s is UpstreamSnapshot => s !== undefined).sort((a, b) => a.name.localeCompare(b.name));
}
