// Everything `move` checks before it changes anything, each refusal typed and with what to do
// about it; and the plan's steps as the dry run prints them.
import { NFS_DRIVER_NAME } from '../../nfs/index.js';
import {
  MOVER_VM_NAME,
  MoverVm,
  PROXMOX_DRIVER_NAME,
  isOwnershipRefusal,
  parseVolumeId,
  volidOf,
  volidOfValue,
  type MoverApi,
} from '../../proxmox/index.js';
import { missingMovePrivileges } from '../privileges.js';
import type { MoveKube, PersistentVolume, PersistentVolumeClaim } from './kube-port.js';
import { replacementPvName, targetHandle } from './objects.js';
import { type MoveRecord, readRecord, saveClaim } from './record.js';
import { Refusal } from './refusal.js';

export interface PlanInput {
  kube: MoveKube;
  api: MoverApi & {
    permissions?: (o?: { signal?: AbortSignal | undefined }) => Promise<Record<string, Record<string, number>>>;
  };
  region: string;
  vmid: number;
  namespace: string;
  name: string;
  toZone: string;
  signal?: AbortSignal;
}

export interface Plan {
  pvc: PersistentVolumeClaim;
  pv: PersistentVolume;
  record: MoveRecord;
  source: { node: string; storage: string; volid: string; sizeBytes: number };
}

const errText = (e: unknown) => (e instanceof Error ? e.message : String(e));

export async function planMove(i: PlanInput): Promise<Plan> {
  const { kube, api, signal } = i;
  const pvc = await kube.getPvc(i.namespace, i.name);
  if (!pvc) throw new Refusal('claim-not-found', `claim ${i.namespace}/${i.name} not found`);
  if (pvc.status?.phase !== 'Bound' || !pvc.spec.volumeName) {
    throw new Refusal(
      'claim-not-bound',
      `claim ${i.namespace}/${i.name} is ${pvc.status?.phase ?? 'not bound'}: only a bound claim has a disk to move`,
    );
  }
  const pv = await kube.getPv(pvc.spec.volumeName);
  if (!pv) throw new Refusal('pv-not-found', `PV ${pvc.spec.volumeName} of claim ${i.namespace}/${i.name} not found`);
  if (readRecord(pv))
    throw new Refusal(
      'move-recorded',
      `PV ${pv.metadata.name} already records a move of this claim (another run started it?); run move again to continue it`,
    );
  const driver = pv.spec.csi?.driver;
  if (driver === NFS_DRIVER_NAME) {
    throw new Refusal(
      'nfs-volume',
      `claim ${i.namespace}/${i.name} is an NFS volume (${NFS_DRIVER_NAME}): its data is on the NAS and every node can mount it; there is nothing to move`,
    );
  }
  const csi = pv.spec.csi;
  if (driver !== PROXMOX_DRIVER_NAME || !csi)
    throw new Refusal(
      'not-proxmox',
      `PV ${pv.metadata.name} is not a Proxmox volume (driver ${driver ?? 'none: not a CSI volume'})`,
    );
  const from = parseVolumeId(csi.volumeHandle);
  if (!from?.zone)
    throw new Refusal(
      'handle-without-zone',
      `PV ${pv.metadata.name}: volume handle ${csi.volumeHandle} does not name a host (region/zone/storage/disk)`,
    );
  if (from.region !== i.region)
    throw new Refusal(
      'other-region',
      `PV ${pv.metadata.name} is in region ${from.region}; the config's cluster is ${i.region}`,
    );
  if (from.zone === i.toZone)
    throw new Refusal('already-there', `claim ${i.namespace}/${i.name} is already on ${i.toZone}`);

  const nodes = (await api.nodeResources({ signal })).map((n) => n.node).sort();
  if (!nodes.includes(i.toZone))
    throw new Refusal(
      'unknown-zone',
      `unknown zone "${i.toZone}": the hosts of cluster ${i.region} are ${nodes.join(', ')}`,
    );
  const storages = await api.storageResources({ signal });
  if (!storages.some((s) => s.storage === from.storage && s.node === i.toZone)) {
    throw new Refusal('no-storage-on-target', `storage ${from.storage} does not exist on ${i.toZone}`);
  }

  const attachments = (await kube.listVolumeAttachments()).filter(
    (va) => va.spec.source.persistentVolumeName === pv.metadata.name,
  );
  if (attachments.length > 0) {
    throw new Refusal(
      'attached',
      `PV ${pv.metadata.name} is attached to ${attachments.map((a) => `${a.spec.nodeName} (VolumeAttachment ${a.metadata.name})`).join(', ')}: scale the workload down and wait for the detach`,
    );
  }
  const pods = (await kube.listPods(i.namespace)).filter(
    (p) =>
      p.status?.phase !== 'Succeeded' &&
      p.status?.phase !== 'Failed' &&
      (p.spec.volumes ?? []).some((v) => v.persistentVolumeClaim?.claimName === i.name),
  );
  if (pods.length > 0)
    throw new Refusal(
      'in-use',
      `claim ${i.namespace}/${i.name} is used by pod ${pods.map((p) => p.metadata.name).join(', ')}: scale the workload down first`,
    );

  const volid = volidOf(from.storage, from.disk);
  // Any VM of the source host with the disk in its config or pending changes (a stale attach, a
  // pending detach, a helper of an interrupted expansion) would make the copy unsafe.
  const vms = (await api.vmResources({ signal })).filter((v) => v.node === from.zone && v.type === 'qemu');
  for (const vm of vms) {
    const entries = await api.vmPending(vm.node, vm.vmid, { signal });
    for (const e of entries) {
      for (const v of [e.value, e.pending]) {
        if (v === undefined || volidOfValue(e.key, v) !== volid) continue;
        throw new Refusal(
          'disk-in-vm-config',
          `${volid} is in the config of VM ${vm.vmid} (${vm.name}) on ${vm.node} as ${e.key}${e.pending === v ? ' (pending)' : ''}${e.pendingDelete ? ' (pending delete)' : ''}: ` +
            (vm.name === MOVER_VM_NAME
              ? 'another move holds it'
              : 'detach it first (pve-nfs-csi report shows such leftovers)'),
        );
      }
    }
  }
  // The ownership gate's own check (ownership-day2.ts) on a fresh read: snapshot sections too,
  // whose disk Proxmox would free on the source once the migration copied it.
  const mover = new MoverVm({ api, cluster: i.region, vmid: i.vmid, ...(signal && { signal }) });
  try {
    await mover.checkMovable(from.zone, volid);
  } catch (e) {
    if (!isOwnershipRefusal(e)) throw e;
    throw new Refusal('disk-in-vm-config', `${e.message} (pve-nfs-csi report shows such leftovers)`);
  }
  const src = (await api.listContent(from.zone, from.storage, undefined, { signal })).find((c) => c.volid === volid);
  if (!src)
    throw new Refusal(
      'disk-missing',
      `${volid} does not exist on ${from.zone}: nothing to move (pve-nfs-csi report lists PVs whose disk is missing)`,
    );
  const taken = (await api.listContent(i.toZone, from.storage, undefined, { signal })).some((c) => c.volid === volid);
  if (taken)
    throw new Refusal(
      'target-disk-exists',
      `a disk ${volid} already exists on ${i.toZone}; Proxmox would import under another name. Remove the leftover first (pve-nfs-csi report)`,
    );

  const helper = await mover.state();
  if (helper) {
    if (helper.name !== MOVER_VM_NAME)
      throw new Refusal(
        'vmid-taken',
        `VMID ${i.vmid} is taken by VM "${helper.name}" on ${helper.node}; move needs it for its helper VM`,
      );
    if (helper.volids.length > 0)
      throw new Refusal(
        'mover-busy',
        `the helper VM ${i.vmid} on ${helper.node} holds ${helper.volids.join(', ')}: another move is in progress; finish it first`,
      );
  }
  if (api.permissions) {
    let missing: string[];
    try {
      missing = missingMovePrivileges(await api.permissions({ signal }), i.vmid, from.storage);
    } catch (e) {
      throw new Refusal('privileges-unreadable', `cannot read the Proxmox privileges: ${errText(e)}`);
    }
    if (missing.length > 0)
      throw new Refusal('privileges-missing', `the Proxmox credentials lack ${missing.join('; ')}`);
  }

  const newPv = replacementPvName(from.disk, i.toZone);
  if (await kube.getPv(newPv))
    throw new Refusal('replacement-pv-exists', `PV ${newPv} (the name move gives the replacement) already exists`);
  const record: MoveRecord = {
    v: 1,
    claim: { namespace: i.namespace, name: i.name },
    oldPv: pv.metadata.name,
    newPv,
    from: csi.volumeHandle,
    to: targetHandle(csi.volumeHandle, i.toZone, from.disk),
    toZone: i.toZone,
    reclaimPolicy: pv.spec.persistentVolumeReclaimPolicy ?? 'Delete',
    savedClaim: saveClaim(pvc),
    step: 'planned',
    started: new Date().toISOString(),
  };
  return { pvc, pv, record, source: { node: from.zone, storage: from.storage, volid, sizeBytes: src.size } };
}

/** The steps a move of `r` takes, as the dry run prints them. */
export function planSteps(r: MoveRecord, moverVmid: number): string[] {
  const from = parseVolumeId(r.from);
  if (!from) return [];
  return [
    `PV ${r.oldPv}: reclaimPolicy ${r.reclaimPolicy} -> Retain; record the move on it`,
    `create helper VM ${moverVmid} (stopped, no disks of its own) on ${from.zone} holding ${from.storage}:${from.disk}`,
    `migrate VM ${moverVmid} ${from.zone} -> ${r.toZone} offline: Proxmox copies the disk, then frees the source copy`,
    `helper VM ${moverVmid} lets go of the disk on ${r.toZone} and is destroyed`,
    `delete claim ${r.claim.namespace}/${r.claim.name} (UID ${r.savedClaim.uid}); PV ${r.oldPv} keeps the disk (Retain)`,
    `create PV ${r.newPv}: handle ${r.to}, zone ${r.toZone}, pre-bound to ${r.claim.namespace}/${r.claim.name}`,
    `recreate claim ${r.claim.namespace}/${r.claim.name} (same labels, annotations, owners, spec; new UID) with volumeName ${r.newPv}`,
    `wait for the bind; delete PV ${r.oldPv}; PV ${r.newPv} reclaimPolicy -> ${r.reclaimPolicy}`,
  ];
}
