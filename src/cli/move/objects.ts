// The replacement PV and the recreated claim, built from the old objects and the record.
//
// Why a replacement PV and a recreated claim: a bound claim's spec.volumeName and a PV's
// spec.csi.volumeHandle and spec.nodeAffinity are immutable, so a PV cannot be pointed at another
// host and a bound claim cannot be pointed at another PV. The claim is recreated under the same
// namespace, name, labels, annotations and spec (its UID changes; pods reference claims by name,
// so a Deployment or StatefulSet just starts again), with spec.volumeName naming the replacement
// PV, whose claimRef is pre-bound to that name — the PV controller binds exactly that pair.
import {
  TOPOLOGY_REGION_KEY as REGION_KEY,
  TOPOLOGY_ZONE_KEY as ZONE_KEY,
  formatVolumeId,
  parseVolumeId,
} from '../../proxmox/index.js';
import type { PersistentVolume, PersistentVolumeClaim } from './kube-port.js';
import { MOVED_FROM_KEY, type MoveRecord, RECORD_KEY } from './record.js';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/**
 * Name of the replacement PV: `<disk's pv name>-<zone>`. Deterministic (a re-run finds it), never
 * growing over repeated moves, and unique per disk and host.
 */
export function replacementPvName(disk: string, zone: string): string {
  const base = disk
    .replace(/^vm-\d+-/, '')
    .toLowerCase()
    .replace(/[^a-z0-9.-]/g, '-')
    .slice(0, 200);
  const z = zone.toLowerCase();
  return `${base}-${DNS_LABEL.test(z) ? z : Buffer.from(zone).toString('hex').slice(0, 40)}`;
}

/** The volume handle on the target: same region and storage, target zone, the disk's name there. */
export function targetHandle(fromHandle: string, toZone: string, targetDisk: string): string {
  const v = parseVolumeId(fromHandle);
  if (!v) throw new Error(`volume handle ${fromHandle} is not region/zone/storage/disk`);
  return formatVolumeId({ ...v, zone: toZone, disk: targetDisk });
}

/** nodeAffinity naming region and zone, as the provisioner writes it for this driver. */
export function zoneAffinity(region: string, zone: string): NonNullable<PersistentVolume['spec']['nodeAffinity']> {
  return {
    required: {
      nodeSelectorTerms: [
        {
          matchExpressions: [
            { key: REGION_KEY, operator: 'In', values: [region] },
            { key: ZONE_KEY, operator: 'In', values: [zone] },
          ],
        },
      ],
    },
  };
}

export function buildReplacementPv(old: PersistentVolume, r: MoveRecord): PersistentVolume {
  const to = parseVolumeId(r.to);
  const csi = old.spec.csi;
  if (!to || !csi) throw new Error(`PV ${r.oldPv} or the recorded handle ${r.to} is not a Proxmox volume`);
  const annotations: Record<string, string> = {};
  for (const [k, v] of Object.entries(old.metadata.annotations ?? {})) {
    if (k === RECORD_KEY || k === 'pv.kubernetes.io/bound-by-controller') continue;
    annotations[k] = v;
  }
  annotations[MOVED_FROM_KEY] = r.oldPv;
  annotations[RECORD_KEY] = JSON.stringify(r);
  // claimRef, nodeAffinity, csi and the reclaim policy are set below; the rest is kept
  const rest = { ...old.spec };
  delete rest.claimRef;
  delete rest.nodeAffinity;
  delete rest.csi;
  delete rest.persistentVolumeReclaimPolicy;
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: {
      name: r.newPv,
      ...(old.metadata.labels && { labels: old.metadata.labels }),
      annotations,
    },
    spec: {
      ...rest,
      csi: { ...csi, volumeHandle: r.to },
      // Retain until the move is done: a mistake can never delete the disk through this PV
      persistentVolumeReclaimPolicy: 'Retain',
      nodeAffinity: zoneAffinity(to.region, to.zone),
      claimRef: { apiVersion: 'v1', kind: 'PersistentVolumeClaim', namespace: r.claim.namespace, name: r.claim.name },
    },
  };
}

export function buildClaim(r: MoveRecord): PersistentVolumeClaim {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: {
      name: r.claim.name,
      namespace: r.claim.namespace,
      ...(r.savedClaim.labels && { labels: r.savedClaim.labels }),
      ...(r.savedClaim.annotations && { annotations: r.savedClaim.annotations }),
      ...(r.savedClaim.ownerReferences && { ownerReferences: r.savedClaim.ownerReferences }),
    },
    spec: { ...r.savedClaim.spec, volumeName: r.newPv },
  };
}
