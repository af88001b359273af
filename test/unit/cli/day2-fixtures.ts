// Facts built by hand for the day-2 ownership rule (src/cli/report/ownership.ts): NFS classes,
// PVs in every spelling, directories and archives, Proxmox disks. Shared by the regression
// tests and the property-based search.
import type { ClusterFacts, KubeFacts, NfsArchive, NfsDir, NfsFacts } from '../../../src/cli/report/facts.js';
import { nfsClasses } from '../../../src/cli/report/facts.js';
import { absolute } from '../../../src/cli/report/ownership.js';
import type { V1PersistentVolume, V1StorageClass } from '../../../src/k8s/index.js';
import type { Cluster } from '../../../src/proxmox/controller/state/cluster.js';

export const NOW = Date.UTC(2026, 11, 1);
export const HOUR = 3600e3;
export const rules = { controllerVmId: 9999, graceMs: HOUR, now: NOW };
export const NSPVC = '${pvc.metadata.namespace}/${pvc.metadata.name}';
export const NSPV = '${pvc.metadata.namespace}/${pv.metadata.name}';
/** What the resolver says: localhost and 127.0.0.1 are one server, nas another. */
export const ADDRESSES = new Map([
  ['127.0.0.1', ['127.0.0.1']],
  ['localhost', ['127.0.0.1', '::1']],
  ['nas', ['192.0.2.7']],
]);

export const uid = (n: number) => `0b1c2d3e-4f50-4617-8293-${n.toString(16).padStart(12, '0')}`;

export function nfsClass(
  name: string,
  share: string,
  subDir: string | undefined,
  onDelete?: string,
  server = '127.0.0.1',
): V1StorageClass {
  return {
    metadata: { name },
    provisioner: 'nfs.csi.k8s.io',
    parameters: { server, share, ...(subDir !== undefined && { subDir }), ...(onDelete && { onDelete }) },
  };
}

/** A static PV by attributes (share + subDir as written), or a dynamic one by handle. */
export function staticNfsPv(name: string, server: string, share: string, subDir: string): V1PersistentVolume {
  return {
    metadata: { name },
    spec: {
      persistentVolumeReclaimPolicy: 'Retain',
      csi: { driver: 'nfs.csi.k8s.io', volumeHandle: name, volumeAttributes: { server, share, subDir } },
    },
  };
}
export function dynamicNfsPv(name: string, server: string, share: string, subDir: string): V1PersistentVolume {
  return {
    metadata: { name },
    spec: {
      csi: { driver: 'nfs.csi.k8s.io', volumeHandle: `${server}#${share.replace(/^\//, '')}#${subDir}#${name}#` },
    },
  };
}
export function inTreeNfsPv(name: string, server: string, path: string): V1PersistentVolume {
  return { metadata: { name }, spec: { nfs: { server, path } } };
}

export function kube(o: Partial<KubeFacts> = {}): KubeFacts {
  return { pvs: [], pvcs: [], attachments: [], classes: [], birth: NOW - 30 * 24 * HOUR, ...o };
}

export interface Layout {
  classes: V1StorageClass[];
  /** Directories: [server, absolute path, age ms]. */
  dirs?: Array<[string, string, number]>;
  archives?: Array<[string, string, number]>;
}

/** NFS facts as readNfs would gather them: each directory found by a class whose share holds it. */
export function nfsFacts(l: Layout): NfsFacts {
  const classes = nfsClasses(l.classes);
  const holder = (at: string) =>
    classes.filter((c) => at.startsWith(c.share + '/')).sort((a, b) => a.share.length - b.share.length)[0] ??
    classes[0];
  const dirs: NfsDir[] = (l.dirs ?? []).map(([server, at, age]) => {
    const c = holder(at);
    const share = c?.share ?? '/';
    return { server, share, path: at.slice(share.length + 1), at: absolute(at), changedAt: NOW - age };
  });
  const archives: NfsArchive[] = (l.archives ?? []).map(([server, at, age]) => {
    const c = holder(at);
    const share = c?.share ?? '/';
    const path = at.slice(share.length + 1);
    return {
      server,
      share,
      path,
      at: absolute(at),
      original: path.replace(/^archived-/, ''),
      archivedAt: NOW - age,
      timeFrom: 'times',
    };
  });
  return {
    classes,
    addresses: ADDRESSES,
    dirs,
    archives,
    snapshots: [],
    upstreamSnapshots: [],
    restoreMarkers: [],
    errors: [],
  };
}

export function proxmoxPv(name: string, disk: string, region = 'homelab'): V1PersistentVolume {
  return {
    metadata: { name },
    spec: {
      persistentVolumeReclaimPolicy: 'Retain',
      csi: { driver: 'csi.proxmox.sinextra.dev', volumeHandle: `${region}/hyper1/local-lvm/${disk}` },
    },
  };
}

export function clusterFacts(
  disks: Array<{ disk: string; age: number }>,
  scan: ClusterFacts['scan'] = [],
): ClusterFacts {
  return {
    region: 'homelab',
    cluster: null as unknown as Cluster /* findings never touch it */,
    storages: [{ storage: 'local-lvm', node: 'hyper1', content: 'images', shared: false }],
    disks: disks.map(({ disk, age }) => ({
      node: 'hyper1',
      storage: 'local-lvm',
      disk,
      volid: `local-lvm:${disk}`,
      size: 1,
      shared: false,
      createdAt: NOW - age,
    })),
    unlisted: [],
    scan,
  };
}
