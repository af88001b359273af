// Everything `move` checks before it changes anything, each refusal with what to do about it.
import { CsiError } from '../errors.js';
import type { MoverApi } from '../proxmox/move/helper-vm.js';
import { HELPER_NAME, HelperVm, volidOfValue } from '../proxmox/move/helper-vm.js';
import { parseVolumeId, volidOf } from '../proxmox/volume-id.js';
import type { MoveKube, PersistentVolume, PersistentVolumeClaim } from './kube-port.js';
import { replacementPvName, targetHandle } from './objects.js';
import { missingMovePrivileges } from './privileges.js';
import { type MoveRecord, readRecord, saveClaim } from './record.js';

export const PROXMOX_DRIVER = 'csi.proxmox.sinextra.dev';
export const NFS_DRIVER = 'nfs.csi.k8s.io';

/** A reason not to move (exit code 1, nothing changed). */
export class Refusal extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'Refusal';
  }
}

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
  if (!pvc) throw new Refusal(`claim ${i.namespace}/${i.name} not found`);
  if (pvc.status?.phase !== 'Bound' || !pvc.spec.volumeName) {
    throw new Refusal(
      `claim ${i.namespace}/${i.name} is ${pvc.status?.phase ?? 'not bound'}: only a bound claim has a disk to move`,
    );
  }
  const pv = await kube.getPv(pvc.spec.volumeName);
  if (!pv) throw new Refusal(`PV ${pvc.spec.volumeName} of claim ${i.namespace}/${i.name} not found`);
  if (readRecord(pv))
    throw new Refusal(
      `PV ${pv.metadata.name} already records a move of this claim (another run started it?); run move again to continue it`,
    );
  const driver = pv.spec.csi?.driver;
  if (driver === NFS_DRIVER) {
    throw new Refusal(
      `claim ${i.namespace}/${i.name} is an NFS volume (${NFS_DRIVER}): its data is on the NAS and every node can mount it; there is nothing to move`,
    );
  }
  const csi = pv.spec.csi;
  if (driver !== PROXMOX_DRIVER || !csi)
    throw new Refusal(`PV ${pv.metadata.name} is not a Proxmox volume (driver ${driver ?? 'none: not a CSI volume'})`);
  const from = parseVolumeId(csi.volumeHandle);
  if (!from?.zone)
    throw new Refusal(
      `PV ${pv.metadata.name}: volume handle ${csi.volumeHandle} does not name a host (region/zone/storage/disk)`,
    );
  if (from.region !== i.region)
    throw new Refusal(`PV ${pv.metadata.name} is in region ${from.region}; the config's cluster is ${i.region}`);
  if (from.zone === i.toZone) throw new Refusal(`claim ${i.namespace}/${i.name} is already on ${i.toZone}`);

  const nodes = (await api.nodeResources({ signal })).map((n) => n.node).sort();
  if (!nodes.includes(i.toZone))
    throw new Refusal(`unknown zone "${i.toZone}": the hosts of cluster ${i.region} are ${nodes.join(', ')}`);
  const storages = await api.storageResources({ signal });
  if (!storages.some((s) => s.storage === from.storage && s.node === i.toZone)) {
    throw new Refusal(`storage ${from.storage} does not exist on ${i.toZone}`);
  }

  const attachments = (await kube.listVolumeAttachments()).filter(
    (va) => va.spec.source.persistentVolumeName === pv.metadata.name,
  );
  if (attachments.length > 0) {
    throw new Refusal(
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
          `${volid} is in the config of VM ${vm.vmid} (${vm.name}) on ${vm.node} as ${e.key}${e.pending === v ? ' (pending)' : ''}${e.pendingDelete ? ' (pending delete)' : ''}: ` +
            (vm.name === HELPER_NAME
              ? 'another move holds it'
              : 'detach it first (pve-nfs-csi report shows such leftovers)'),
        );
      }
    }
  }
  const src = (await api.listContent(from.zone, from.storage, undefined, { signal })).find((c) => c.volid === volid);
  if (!src)
    throw new Refusal(
      `${volid} does not exist on ${from.zone}: nothing to move (pve-nfs-csi report lists PVs whose disk is missing)`,
    );
  const taken = (await api.listContent(i.toZone, from.storage, undefined, { signal })).some((c) => c.volid === volid);
  if (taken)
    throw new Refusal(
      `a disk ${volid} already exists on ${i.toZone}; Proxmox would import under another name. Remove the leftover first (pve-nfs-csi report)`,
    );

  const helper = await new HelperVm({ api, cluster: i.region, vmid: i.vmid, ...(signal && { signal }) }).state();
  if (helper) {
    if (helper.name !== HELPER_NAME)
      throw new Refusal(
        `VMID ${i.vmid} is taken by VM "${helper.name}" on ${helper.node}; move needs it for its helper VM`,
      );
    if (helper.volids.length > 0)
      throw new Refusal(
        `the helper VM ${i.vmid} on ${helper.node} holds ${helper.volids.join(', ')}: another move is in progress; finish it first`,
      );
  }
  if (api.permissions) {
    let missing: string[];
    try {
      missing = missingMovePrivileges(await api.permissions({ signal }), i.vmid, from.storage);
    } catch (e) {
      throw new Refusal(`cannot read the Proxmox privileges: ${errText(e)}`);
    }
    if (missing.length > 0) throw new Refusal(`the Proxmox credentials lack ${missing.join('; ')}`);
  }

  const newPv = replacementPvName(from.disk, i.toZone);
  if (await kube.getPv(newPv)) throw new Refusal(`PV ${newPv} (the name move gives the replacement) already exists`);
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

export const isRefusal = (e: unknown): e is Refusal => e instanceof Refusal;
export const isTyped = (e: unknown): e is CsiError => e instanceof CsiError;
