// The move record: one JSON annotation written on the old PV before anything changes, updated after
// every step, and copied onto the replacement PV once that exists. Whatever line a previous run
// died on, the next run finds the record (on the claim's PV, or on any PV naming the claim when
// the claim itself is gone) and, together with what Proxmox and the API server show, knows what is
// done and what is left. It also keeps what the claim looked like, so a claim deleted by the move
// is recreated with the same name, labels, annotations and spec.
import type { MoveKube, PersistentVolume, PersistentVolumeClaim } from './kube-port.js';

export const RECORD_KEY = 'pve-nfs-csi.io/move';
export const MOVED_FROM_KEY = 'pve-nfs-csi.io/moved-from';

/** Steps in order; a record's `step` is the last one completed. */
export const STEPS = [
  'planned', // old PV: reclaim Retain, record written
  'holding', // helper VM on the source host holds the disk
  'migrating', // migration task started (upid recorded)
  'migrated', // the disk is on the target host (targetVolid known)
  'released', // helper VM gone; only the disk is left
  'claim-deleted', // the old claim object is gone
  'pv-created', // replacement PV exists, pre-bound to the claim's name
  'claim-created', // claim recreated with spec.volumeName = replacement PV
  'bound', // claim bound to the replacement PV
  'done', // old PV deleted, leftover freed, reclaim policy restored
] as const;
export type Step = (typeof STEPS)[number];

export const stepIndex = (s: Step): number => STEPS.indexOf(s);

/** What of the claim is kept to recreate it. */
export interface SavedClaim {
  uid: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  /** A StatefulSet's claim may be owned by it (persistentVolumeClaimRetentionPolicy); kept. */
  ownerReferences?: NonNullable<PersistentVolumeClaim['metadata']['ownerReferences']>;
  spec: PersistentVolumeClaim['spec'];
}

export interface MoveRecord {
  v: 1;
  claim: { namespace: string; name: string };
  oldPv: string;
  newPv: string;
  /** Volume handles region/zone/storage/disk before and after. */
  from: string;
  to: string;
  toZone: string;
  /** Volume id on the target once migrated (Proxmox may import under another name). */
  targetVolid?: string;
  /** The source copy left behind by a migration that could not free it; freed after the bind. */
  leftover?: string;
  upid?: string;
  reclaimPolicy: string;
  savedClaim: SavedClaim;
  step: Step;
  started: string;
  /** The new claim's UID once created. */
  newClaimUid?: string;
}

export function readRecord(pv: PersistentVolume | undefined): MoveRecord | undefined {
  const raw = pv?.metadata.annotations?.[RECORD_KEY];
  if (!raw) return undefined;
  let r: unknown;
  try {
    r = JSON.parse(raw);
  } catch {
    return undefined;
  }
  const rec = r as Partial<MoveRecord> | null;
  return rec?.v === 1 && typeof rec.step === 'string' && stepIndex(rec.step) >= 0 ? (rec as MoveRecord) : undefined;
}

export const recordPatch = (r: MoveRecord | null) => ({
  metadata: { annotations: { [RECORD_KEY]: r === null ? null : JSON.stringify(r) } },
});

/** Annotations the PV controller and scheduler set on a claim; a recreated claim starts without them. */
const CONTROLLER_ANNOTATIONS = [
  'pv.kubernetes.io/bind-completed',
  'pv.kubernetes.io/bound-by-controller',
  'volume.kubernetes.io/selected-node',
];

export function saveClaim(pvc: PersistentVolumeClaim): SavedClaim {
  const annotations = Object.fromEntries(
    Object.entries(pvc.metadata.annotations ?? {}).filter(([k]) => !CONTROLLER_ANNOTATIONS.includes(k)),
  );
  // volumeName is set to the replacement; a data source means nothing for a claim that is pre-bound
  const spec = { ...pvc.spec };
  delete spec.dataSource;
  delete spec.dataSourceRef;
  delete spec.volumeName;
  return {
    uid: pvc.metadata.uid ?? '',
    ...(pvc.metadata.labels && { labels: pvc.metadata.labels }),
    ...(Object.keys(annotations).length > 0 && { annotations }),
    ...(pvc.metadata.ownerReferences?.length && { ownerReferences: pvc.metadata.ownerReferences }),
    spec,
  };
}

/** The record of a move of this claim, wherever it is: on the claim's PV, or on any PV naming the claim. */
export async function findRecord(kube: MoveKube, namespace: string, name: string): Promise<MoveRecord | undefined> {
  const pvc = await kube.getPvc(namespace, name);
  if (pvc?.spec.volumeName) {
    const r = readRecord(await kube.getPv(pvc.spec.volumeName));
    if (r) return r;
  }
  let best: MoveRecord | undefined;
  for (const pv of await kube.listPvs()) {
    const r = readRecord(pv);
    if (!r || r.claim.namespace !== namespace || r.claim.name !== name) continue;
    if (!best || stepIndex(r.step) > stepIndex(best.step)) best = r;
  }
  return best;
}
