// What `report` looks at, read once: the Kubernetes objects, and per Proxmox cluster the driver's
// disks on every storage plus every VM's config (current and pending) through the driver's own
// scan; per NFS share the claim directories, archives and snapshots. Nothing here decides anything
// (findings.ts does) or changes anything (fix.ts does).
import type { Logger } from 'pino';
import type {
  KubeApi,
  V1PersistentVolume,
  V1PersistentVolumeClaim,
  V1StorageClass,
  V1VolumeAttachment,
} from '../../k8s/index.js';
import { lookup } from 'node:dns/promises';
import { inSlices } from '../../slices.js';
import { findArchives, dirsAtDepth, isArchivePath, type Archive } from '../../nfs/controller/archives.js';
import { SNAPSHOTS } from '../../nfs/controller/snapshots/snapshots.js';
import { scanShareSnapshots, type SnapshotDir } from '../../nfs/controller/snapshots/snapshot-scan.js';
import { scanRestoreMarkers, type RestoreMarker } from '../../nfs/controller/snapshots/restore-markers.js';
import { scanUpstreamSnapshots, type UpstreamSnapshot } from '../../nfs/controller/snapshots/upstream-snapshot-scan.js';
import type { NfsStores } from '../../nfs/controller/store/store.js';
import type { ProxmoxApi, StorageResource } from '../../proxmox/api/api.js';
import { Cluster, holdsImages, isAvailable } from '../../proxmox/controller/state/cluster.js';
import { scanVms, type VmEntries } from '../../proxmox/controller/state/scan.js';
import { diskOwner, parseVolid } from '../../proxmox/volume-id.js';
import { type HelperFact, readHelpers } from './helper-vms.js';
import {
  absolute,
  ancestors,
  classPlace,
  nfsPlaceOf,
  NFS_DRIVER,
  servers,
  type Addresses,
  type ClassPlace,
} from './ownership.js';

export const PROXMOX_DRIVER = 'csi.proxmox.sinextra.dev';
export { NFS_DRIVER };

export interface KubeFacts {
  pvs: V1PersistentVolume[];
  pvcs: V1PersistentVolumeClaim[];
  attachments: V1VolumeAttachment[];
  classes: V1StorageClass[];
  /**
   * When this cluster was made (its kube-system Namespace's creationTimestamp, ms): nothing older
   * can be a leftover of it. undefined when it cannot be read.
   */
  birth?: number;
}

/**
 * The Kubernetes objects cut to the fields the findings read (names, handles, places, claim
 * references, phases, resize status, attachments): at 10,000 claims the listed objects are tens
 * of MiB, their cut a few. What is not read here must not be read by the judgement either.
 */
export async function slimKube(k: KubeFacts): Promise<KubeFacts> {
  const pvs: V1PersistentVolume[] = [];
  await inSlices(k.pvs, (pv) => pvs.push(slimPv(pv)));
  const pvcs: V1PersistentVolumeClaim[] = [];
  await inSlices(k.pvcs, (c) => pvcs.push(slimPvc(c)));
  return { ...k, pvs, pvcs, attachments: k.attachments.map(slimAttachment) };
}

function slimPv(pv: V1PersistentVolume): V1PersistentVolume {
  const { csi, nfs, claimRef } = pv.spec ?? {};
  return {
    metadata: { name: pv.metadata?.name ?? '?' },
    spec: {
      ...(csi && {
        csi: {
          driver: csi.driver,
          volumeHandle: csi.volumeHandle,
          ...(csi.volumeAttributes && { volumeAttributes: csi.volumeAttributes }),
        },
      }),
      ...(nfs && { nfs: { server: nfs.server, path: nfs.path } }),
      ...(claimRef && {
        claimRef: {
          ...(claimRef.namespace !== undefined && { namespace: claimRef.namespace }),
          ...(claimRef.name !== undefined && { name: claimRef.name }),
        },
      }),
    },
    ...(pv.status?.phase !== undefined && { status: { phase: pv.status.phase } }),
  };
}

function slimPvc(c: V1PersistentVolumeClaim): V1PersistentVolumeClaim {
  return {
    metadata: { name: c.metadata?.name ?? '?', namespace: c.metadata?.namespace ?? '' },
    status: {
      ...(c.status?.allocatedResourceStatuses && { allocatedResourceStatuses: c.status.allocatedResourceStatuses }),
      ...(c.status?.conditions && { conditions: c.status.conditions }),
    },
  };
}

function slimAttachment(a: V1VolumeAttachment): V1VolumeAttachment {
  return {
    spec: {
      attacher: a.spec.attacher,
      nodeName: a.spec.nodeName,
      source: {
        ...(a.spec.source.persistentVolumeName && { persistentVolumeName: a.spec.source.persistentVolumeName }),
      },
    },
  };
}

export async function readKube(kube: KubeApi, signal?: AbortSignal): Promise<KubeFacts> {
  const [pvs, pvcs, attachments, classes, system] = await Promise.all([
    kube.listPersistentVolumes(signal),
    kube.listPersistentVolumeClaims(signal),
    kube.listVolumeAttachments(signal),
    kube.listStorageClasses(signal),
    kube.getNamespace('kube-system', signal).catch(() => undefined),
  ]);
  const born = system?.metadata?.creationTimestamp;
  const birth = born !== undefined ? new Date(born).getTime() : undefined;
  return await slimKube({
    pvs,
    pvcs,
    attachments,
    classes,
    ...(birth !== undefined && !Number.isNaN(birth) && { birth }),
  });
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
  /** The driver's helper VMs of thin copies (copy, snapshot and volume VMs) with what they own. */
  helpers?: HelperFact[];
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
  const helpers = await readHelpers(api, scan, storages, controllerVmId, signal);
  disks.sort((a, b) => a.volid.localeCompare(b.volid) || a.node.localeCompare(b.node));
  return { region, cluster, storages, disks, unlisted, scan, helpers };
}

/** The NFS side, across every share of every NFS StorageClass, each directory once. */
export interface NfsFacts {
  classes: ClassPlace[];
  /** Every server name of a class or a PV, resolved (ownership.ts compares servers by address). */
  addresses: Addresses;
  /** Claim-shaped directories (a class's layout, proof names where it has them). */
  dirs: NfsDir[];
  archives: NfsArchive[];
  /** The snapshot directories (.snapshots/<name>) of every class share, complete or partial. */
  snapshots: NfsSnapshotDir[];
  /** csi-driver-nfs's snapshot archives (<share>/<name>/<src>.tar.gz or .tar) right below every class share. */
  upstreamSnapshots: NfsUpstreamSnapshot[];
  /** The restore records (.snapshots/.restore-<claim>) of every class share. */
  restoreMarkers: NfsRestoreMarker[];
  /** Shares that could not be scanned: what they hold is unknown, not absent. */
  errors: Array<{ where: string; error: string }>;
}

export interface NfsDir {
  server: string;
  /** The share of the class that found it, and the path relative to it. */
  share: string;
  path: string;
  /** Absolute path on the server. */
  at: string;
  changedAt: number;
}

export interface NfsArchive extends Archive {
  server: string;
  share: string;
  at: string;
}

export interface NfsSnapshotDir extends SnapshotDir {
  server: string;
  share: string;
  /** Absolute path on the server. */
  at: string;
}

export interface NfsUpstreamSnapshot extends UpstreamSnapshot {
  server: string;
  share: string;
  /** Absolute path of its directory on the server. */
  at: string;
}

export interface NfsRestoreMarker extends RestoreMarker {
  server: string;
  share: string;
  /** Absolute path on the server. */
  at: string;
}

export function nfsClasses(classes: readonly V1StorageClass[]): ClassPlace[] {
  return classes.flatMap((c) => {
    if (c.provisioner !== NFS_DRIVER) return [];
    const p = classPlace(c.metadata?.name ?? '?', c.parameters);
    return p ? [p] : [];
  });
}

/** Resolves every name (an address resolves to itself; a name that fails, to nothing). */
export async function resolveServers(names: Iterable<string>): Promise<Addresses> {
  const unique = [...new Set([...names].map((n) => n.trim().toLowerCase()).filter((n) => n !== ''))];
  const out = new Map<string, string[]>();
  await Promise.all(
    unique.map(async (n) => {
      try {
        out.set(
          n,
          (await lookup(n, { all: true })).map((a) => a.address),
        );
      } catch {
        out.set(n, []);
      }
    }),
  );
  return out;
}

export async function readNfs(
  classes: readonly ClassPlace[],
  pvs: readonly V1PersistentVolume[],
  stores: NfsStores,
  o: {
    signal: AbortSignal;
    sizes: boolean;
    /** Scan only these classes' shares (default: all); every class still judges. */
    scan?: readonly ClassPlace[];
    /** Look for claim directories too (default), or only for archives. */
    claims?: boolean;
  },
): Promise<NfsFacts> {
  const pvPlaces = pvs.flatMap((pv) => {
    const p = nfsPlaceOf(pv);
    return p && p !== 'unknown' ? [p] : [];
  });
  const pvServers = pvPlaces.map((p) => p.server);
  const addresses = await resolveServers([...classes.map((c) => c.server), ...pvServers]);
  const ids = servers(addresses);
  const facts: NfsFacts = {
    classes: [...classes],
    addresses,
    dirs: [],
    archives: [],
    snapshots: [],
    upstreamSnapshots: [],
    restoreMarkers: [],
    errors: [],
  };
  const seenDirs = new Set<string>();
  const seenArchives = new Set<string>();
  const seenSnapshotShares = new Set<string>();
  const upstreamAt = new Set<string>();
  const key = (server: string, at: string) => `${ids.idOf(server) ?? server}\u0000${at}`;
  // Every PV directory and its ancestors, once: "does a PV sit at or below this directory" is
  // then one lookup, not a pass over every PV for every directory of every share.
  const pvHeld = new Set<string>();
  for (const p of pvPlaces) for (const at of [p.path, ...ancestors(p.path)]) pvHeld.add(key(p.server, at));
  await Promise.all(
    (o.scan ?? classes).map(async (c) => {
      const store = stores.open(c.server, c.share);
      const found = c.layout.proof ?? c.layout.could;
      try {
        const paths =
          o.claims === false
            ? []
            : await dirsAtDepth(
                store,
                found.length,
                (name, level) => level > 0 || !(isArchivePath(name) || name === SNAPSHOTS),
                {
                  signal: o.signal,
                },
              );
        for (const p of paths) {
          const at = absolute(c.share, p);
          if (!p.split('/').every((s, i) => found[i]?.test(s)) || seenDirs.has(key(c.server, at))) continue;
          seenDirs.add(key(c.server, at));
          const st = await store.stat(p, { signal: o.signal });
          if (st)
            facts.dirs.push({
              server: c.server,
              share: c.share,
              path: p,
              at,
              changedAt: Math.max(st.mtimeMs ?? 0, st.ctimeMs ?? 0),
            });
        }
        for (const a of await findArchives(store, found.length, { signal: o.signal, sizes: o.sizes })) {
          const at = absolute(c.share, a.path);
          if (seenArchives.has(key(c.server, at))) continue;
          seenArchives.add(key(c.server, at));
          facts.archives.push({ ...a, server: c.server, share: c.share, at });
        }
        // Snapshots sit on the share of the claim's class, once per share however many classes use it.
        if (!seenSnapshotShares.has(key(c.server, absolute(c.share, SNAPSHOTS)))) {
          seenSnapshotShares.add(key(c.server, absolute(c.share, SNAPSHOTS)));
          for (const sn of await scanShareSnapshots(store, { signal: o.signal, sizes: o.sizes }))
            facts.snapshots.push({ ...sn, server: c.server, share: c.share, at: absolute(c.share, sn.dir) });
          for (const m of await scanRestoreMarkers(store, { signal: o.signal }))
            facts.restoreMarkers.push({ ...m, server: c.server, share: c.share, at: absolute(c.share, m.path) });
          // A directory a PV uses (at or below it) is a claim or holds claims: not listed as a candidate.
          const used = (name: string) => pvHeld.has(key(c.server, absolute(c.share, name)));
          for (const u of await scanUpstreamSnapshots(store, { signal: o.signal, skip: used })) {
            const at = absolute(c.share, u.name);
            facts.upstreamSnapshots.push({ ...u, server: c.server, share: c.share, at });
            upstreamAt.add(key(c.server, at));
          }
        }
      } catch (e) {
        facts.errors.push({ where: `${c.server}:${c.share}`, error: (e as Error).message });
      }
    }),
  );
  // A csi-driver-nfs snapshot's directory is the snapshot's, not an orphaned claim of a class whose layout it fits.
  facts.dirs = facts.dirs.filter((d) => !upstreamAt.has(key(d.server, d.at)));
  facts.dirs.sort((a, b) => a.at.localeCompare(b.at));
  facts.archives.sort((a, b) => a.at.localeCompare(b.at));
  facts.snapshots.sort((a, b) => a.at.localeCompare(b.at));
  facts.upstreamSnapshots.sort((a, b) => a.at.localeCompare(b.at));
  facts.restoreMarkers.sort((a, b) => a.at.localeCompare(b.at));
  return facts;
}
