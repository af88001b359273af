// What `report` looks at, read once: the Kubernetes objects, and per Proxmox cluster the driver's
// disks on every storage plus every VM's config (current and pending) through the driver's own
// scan; per NFS share the claim directories and archives. Nothing here decides anything
// (findings.ts does) or changes anything (fix.ts does).
import type { Logger } from 'pino';
import type {
  KubeApi,
  V1PersistentVolume,
  V1PersistentVolumeClaim,
  V1StorageClass,
  V1VolumeAttachment,
} from '../../k8s/index.js';
import { findArchives, dirsAtDepth, isArchivePath, type Archive } from '../../nfs/controller/archives.js';
import type { NfsStore, NfsStores } from '../../nfs/controller/store.js';
import { parseVolumeId as parseNfsHandle } from '../../nfs/volume-id.js';
import type { ProxmoxApi, StorageResource } from '../../proxmox/api/api.js';
import { Cluster, holdsImages, isAvailable } from '../../proxmox/controller/state/cluster.js';
import { scanVms, type VmEntries } from '../../proxmox/controller/state/scan.js';
import { diskOwner, parseVolid } from '../../proxmox/volume-id.js';

export const PROXMOX_DRIVER = 'csi.proxmox.sinextra.dev';
export const NFS_DRIVER = 'nfs.csi.k8s.io';

export interface KubeFacts {
  pvs: V1PersistentVolume[];
  pvcs: V1PersistentVolumeClaim[];
  attachments: V1VolumeAttachment[];
  classes: V1StorageClass[];
}

export async function readKube(kube: KubeApi, signal?: AbortSignal): Promise<KubeFacts> {
  const [pvs, pvcs, attachments, classes] = await Promise.all([
    kube.listPersistentVolumes(signal),
    kube.listPersistentVolumeClaims(signal),
    kube.listVolumeAttachments(signal),
    kube.listStorageClasses(signal),
  ]);
  return { pvs, pvcs, attachments, classes };
}

export interface DiskFact {
  node: string;
  storage: string;
  disk: string;
  volid: string;
  size: number;
  /** Creation time, ms since the epoch, when the storage reports it. */
  createdAt?: number;
  shared: boolean;
}

export interface ClusterFacts {
  region: string;
  cluster: Cluster;
  storages: StorageResource[];
  /** Disks named vm-<controllerVmId>-… on every storage that holds images. */
  disks: DiskFact[];
  /** Storages that could not be listed (node down…): their disks are unknown, not missing. */
  unlisted: Array<{ node: string; storage: string; error: string }>;
  scan: VmEntries[];
}

/** One cluster's facts; throws when its API cannot be read at all. */
export async function readCluster(
  region: string,
  api: ProxmoxApi,
  controllerVmId: number,
  log: Logger,
  signal?: AbortSignal,
): Promise<ClusterFacts> {
  const cluster = new Cluster(region, api, log);
  const storages = (await cluster.storages(signal, true)).filter(holdsImages);
  // A shared storage has the same disks on every node: list it once, from a node where it is up.
  const targets = new Map<string, StorageResource>();
  for (const r of storages) {
    const key = r.shared ? r.storage : `${r.node}\u0000${r.storage}`;
    const seen = targets.get(key);
    if (!seen || (!isAvailable(seen) && isAvailable(r))) targets.set(key, r);
  }
  const disks: DiskFact[] = [];
  const unlisted: ClusterFacts['unlisted'] = [];
  await Promise.all(
    [...targets.values()].map(async (r) => {
      try {
        for (const item of await api.listContent(r.node, r.storage, controllerVmId, { signal })) {
          const ref = parseVolid(item.volid);
          if (!ref || diskOwner(ref.disk) !== controllerVmId) continue;
          disks.push({
            node: r.node,
            storage: ref.storage,
            disk: ref.disk,
            volid: item.volid,
            size: item.size,
            shared: r.shared,
            ...(item.ctime !== undefined && { createdAt: item.ctime * 1000 }),
          });
        }
      } catch (e) {
        unlisted.push({ node: r.node, storage: r.storage, error: (e as Error).message });
      }
    }),
  );
  const scan = await scanVms(api, cluster.locator, { signal });
  disks.sort((a, b) => a.volid.localeCompare(b.volid) || a.node.localeCompare(b.node));
  return { region, cluster, storages, disks, unlisted, scan };
}

/** How the claims of one StorageClass sit on its share. */
export interface NfsClass {
  name: string;
  server: string;
  /** Absolute share path. */
  share: string;
  /** Segments of a claim directory (subDir template; the PV name when none). */
  depth: number;
  /** What a claim directory's path must look like. */
  pattern: RegExp;
  /** onDelete as the class says it (lower case), undefined when it leaves it to the driver default. */
  onDelete?: string;
}

const lower = (p: Record<string, string> | undefined): Record<string, string | undefined> =>
  Object.fromEntries(Object.entries(p ?? {}).map(([k, v]) => [k.toLowerCase(), v]));
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
// What each template can expand to: Kubernetes object names.
const TEMPLATE_RE: Record<string, string> = {
  'pvc.metadata.namespace': '[a-z0-9]([-a-z0-9]*[a-z0-9])?',
  'pvc.metadata.name': '[a-z0-9]([-a-z0-9.]*[a-z0-9])?',
  'pv.metadata.name': '[a-z0-9]([-a-z0-9.]*[a-z0-9])?',
};

export function nfsClasses(classes: readonly V1StorageClass[]): NfsClass[] {
  const out: NfsClass[] = [];
  for (const c of classes) {
    if (c.provisioner !== NFS_DRIVER) continue;
    const p = lower(c.parameters);
    if (!p.server || p.share === undefined) continue;
    const template = (p.subdir ?? '').replace(/^\/+|\/+$/g, '');
    // Without subDir the driver names the directory after the PV (pvc-<uid> from the provisioner).
    const source = template || '${pv.metadata.name}';
    let re = '';
    let rest = source;
    for (const m of source.matchAll(/\$\{(?<name>[^}]*)\}/g)) {
      const at = rest.indexOf(m[0]);
      re += escape(rest.slice(0, at)) + (TEMPLATE_RE[m.groups?.name ?? ''] ?? '[^/]+');
      rest = rest.slice(at + m[0].length);
    }
    re += escape(rest);
    out.push({
      name: c.metadata?.name ?? '?',
      server: p.server,
      share: '/' + p.share.replace(/^\/+|\/+$/g, ''),
      depth: source.split('/').length,
      pattern: new RegExp(`^${re}$`),
      ...(p.ondelete && { onDelete: p.ondelete.toLowerCase() }),
    });
  }
  return out;
}

export interface ShareFacts {
  server: string;
  share: string;
  store: NfsStore;
  classes: NfsClass[];
  /** Directories at the classes' depths that match a class pattern, with their change time. */
  dirs: Array<{ path: string; changedAt: number; classes: string[] }>;
  archives: Archive[];
  error?: string;
}

/** Where an NFS PV's directory is: dynamic handles and static PVs' volumeAttributes. */
export function nfsDirOf(pv: V1PersistentVolume): { server: string; share: string; subDir: string } | undefined {
  const csi = pv.spec?.csi;
  if (csi?.driver !== NFS_DRIVER) return undefined;
  const a = lower(csi.volumeAttributes);
  if (a.server && a.share !== undefined) {
    return {
      server: a.server,
      share: '/' + a.share.replace(/^\/+|\/+$/g, ''),
      subDir: (a.subdir ?? '').replace(/^\/+|\/+$/g, ''),
    };
  }
  const ref = parseNfsHandle(csi.volumeHandle);
  return ref ? { server: ref.server, share: ref.share, subDir: ref.subDir } : undefined;
}

/**
 * The first PV whose NFS directory on `server:share` is `path`, inside it or above it (a PV of
 * the whole share is above every path): data someone still reaches through a PV.
 */
export function nfsPvAt(
  pvs: readonly V1PersistentVolume[],
  at: { server: string; share: string; path: string },
): V1PersistentVolume | undefined {
  return pvs.find((pv) => {
    const d = nfsDirOf(pv);
    return (
      d !== undefined &&
      d.server === at.server &&
      d.share === at.share &&
      (d.subDir === '' ||
        d.subDir === at.path ||
        d.subDir.startsWith(at.path + '/') ||
        at.path.startsWith(d.subDir + '/'))
    );
  });
}

export async function readShares(
  classes: readonly NfsClass[],
  stores: NfsStores,
  o: { signal: AbortSignal; sizes: boolean },
): Promise<ShareFacts[]> {
  const byShare = new Map<string, NfsClass[]>();
  for (const c of classes) {
    const key = `${c.server}\u0000${c.share}`;
    byShare.set(key, [...(byShare.get(key) ?? []), c]);
  }
  return Promise.all(
    [...byShare.values()]
      .flatMap(([first, ...more]) => (first ? [[first, ...more] as [NfsClass, ...NfsClass[]]] : []))
      .map(async (cs): Promise<ShareFacts> => {
        const { server, share } = cs[0];
        const store = stores.open(server, share);
        const facts: ShareFacts = { server, share, store, classes: cs, dirs: [], archives: [] };
        try {
          const depths = [...new Set(cs.map((c) => c.depth))];
          for (const depth of depths) {
            const paths = await dirsAtDepth(store, depth, (name, level) => level > 0 || !isArchivePath(name), {
              signal: o.signal,
            });
            for (const path of paths) {
              const matching = cs.filter((c) => c.depth === depth && c.pattern.test(path)).map((c) => c.name);
              if (matching.length === 0) continue;
              const st = await store.stat(path, { signal: o.signal });
              if (!st) continue;
              facts.dirs.push({ path, changedAt: Math.max(st.mtimeMs ?? 0, st.ctimeMs ?? 0), classes: matching });
            }
            facts.archives.push(...(await findArchives(store, depth, { signal: o.signal, sizes: o.sizes })));
          }
        } catch (e) {
          facts.error = (e as Error).message;
        }
        return facts;
      }),
  );
}
