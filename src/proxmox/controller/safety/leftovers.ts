// Offline-expansion helper attachments left behind when the controller stopped between
// attaching a volume to a helper VM and unlinking it again (see expand.ts). Nothing is kept on
// disk about them: their WWN marks them in the VM config, and the next expansion, publish,
// unpublish or delete of the volume removes them.
import type { Logger } from 'pino';
import type { Cluster } from '../state/cluster.js';
import { isHelperSite } from '../state/drives.js';
import { type VmEntries, usesOf } from '../state/scan.js';
import type { VmRef } from '../state/vm-locator.js';
import type { VolumeRef } from '../../volume-id.js';

type Disk = Pick<VolumeRef, 'storage' | 'disk'>;

/**
 * VMs whose every reference to the disk is a helper attachment. A VM that also has the disk
 * published is left to the caller: unlinking there would take the disk from a pod.
 */
export function helperHolders(scan: readonly VmEntries[], disk: Disk): VmRef[] {
  const byVm = new Map<number, { vm: VmRef; helperOnly: boolean }>();
  for (const { vm, site } of usesOf(scan, disk.storage, disk.disk).sites) {
    const seen = byVm.get(vm.vmid) ?? { vm: { vmid: vm.vmid, node: vm.node, name: vm.name }, helperOnly: true };
    seen.helperOnly &&= isHelperSite(site);
    byVm.set(vm.vmid, seen);
  }
  return [...byVm.values()].filter((v) => v.helperOnly).map((v) => v.vm);
}

/** Unlinks the disk from these VMs through their queues; resolves once gone from config and pending. */
export async function unlinkFrom(
  cluster: Cluster,
  vms: readonly VmRef[],
  disk: Disk,
  signal?: AbortSignal,
): Promise<void> {
  await Promise.all(vms.map((vm) => cluster.queues.detach(vm, { storage: disk.storage, disk: disk.disk }, signal)));
}

/** Finds helper attachments of the volume on its host's VMs and removes them; returns those VMs. */
export async function removeHelperLeftovers(
  cluster: Cluster,
  ref: VolumeRef,
  o: {
    log: Logger;
    signal?: AbortSignal;
    exclude?: readonly number[];
    scan?: readonly VmEntries[];
    /** reuse VMs' entries read this recently (disk-index.ts) */ maxAgeMs?: number;
  },
): Promise<VmRef[]> {
  const scan =
    o.scan ??
    (await cluster.index.scan({
      signal: o.signal,
      nodes: ref.zone ? [ref.zone] : undefined,
      exclude: o.exclude,
      maxAgeMs: o.maxAgeMs,
    }));
  const vms = helperHolders(scan, ref).filter((vm) => !o.exclude?.includes(vm.vmid));
  if (vms.length === 0) return [];
  o.log.warn(
    { disk: `${ref.storage}:${ref.disk}`, vms: vms.map((v) => v.vmid) },
    'removing helper attachments left by an interrupted offline expansion',
  );
  await unlinkFrom(cluster, vms, ref, o.signal);
  return vms;
}
