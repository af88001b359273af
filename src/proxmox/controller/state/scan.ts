// Which VMs reference a disk: reads every QEMU VM's config (current and pending) on a node.
// Used before deleting a volume, to refuse attaching a single-node volume a second time, to
// find the VM an online expansion goes through, and for ListVolumes/ControllerGetVolume.
import { isCsiError } from '../../../errors.js';
import type { ConfigEntry, ProxmoxReadApi, VmResource } from '../../api/api.js';
import { type DiskSite, drivesByDisk, otherBusKeysOf, sitesOf, unusedOf } from './drives.js';
import type { VmLocator } from './vm-locator.js';
import { mapLimit } from '../../../map-limit.js';

export interface VmEntries {
  vm: VmResource;
  entries: ConfigEntry[];
}

export interface ScanOptions {
  signal?: AbortSignal | undefined;
  /** Only VMs on these Proxmox nodes; all nodes when undefined. */
  nodes?: readonly string[] | undefined;
  /** VMIDs to leave out (the VM being published to). */
  exclude?: readonly number[] | undefined;
}

export async function scanVms(api: ProxmoxReadApi, locator: VmLocator, o: ScanOptions = {}): Promise<VmEntries[]> {
  const vms = (await locator.list(o.signal)).filter(
    (v) => (!o.nodes || o.nodes.includes(v.node)) && !o.exclude?.includes(v.vmid),
  );
  const read = await mapLimit(vms, 8, async (vm) => {
    try {
      return { vm, entries: await api.vmPending(vm.node, vm.vmid, { signal: o.signal }) };
    } catch (e) {
      // Deleted or migrated since the list was read: nothing of ours can be attached there.
      if (isCsiError(e, 'NotFound')) {
        locator.invalidate();
        return undefined;
      }
      throw e;
    }
  });
  return read.filter((r): r is VmEntries => r !== undefined);
}

export interface DiskUse {
  sites: Array<{ vm: VmResource; site: DiskSite }>;
  unused: Array<{ vm: VmResource; key: string }>;
  /** Non-SCSI drive keys (a VM's own boot or EFI disk): never ours to attach elsewhere. */
  otherBus: Array<{ vm: VmResource; key: string }>;
}

export function usesOf(scan: readonly VmEntries[], storage: string, disk: string): DiskUse {
  const use: DiskUse = { sites: [], unused: [], otherBus: [] };
  for (const { vm, entries } of scan) {
    for (const site of sitesOf(entries, storage, disk)) use.sites.push({ vm, site });
    for (const key of unusedOf(entries, storage, disk)) use.unused.push({ vm, key });
    for (const key of otherBusKeysOf(entries, storage, disk)) use.otherBus.push({ vm, key });
  }
  return use;
}

/**
 * usesOf for many disks of one scan: every VM's entries are parsed once and each disk's uses are
 * one lookup, so judging D disks against V VMs costs V × entries + D, not D × V × entries
 * (ListVolumes, the report's findings). Same answer as usesOf, same order.
 */
export function useIndex(scan: readonly VmEntries[]): (storage: string, disk: string) => DiskUse {
  const byDisk = new Map<string, DiskUse>();
  for (const { vm, entries } of scan) {
    for (const [k, d] of drivesByDisk(entries)) {
      let use = byDisk.get(k);
      if (!use) byDisk.set(k, (use = { sites: [], unused: [], otherBus: [] }));
      for (const site of d.sites) use.sites.push({ vm, site });
      for (const key of d.unused) use.unused.push({ vm, key });
      for (const key of d.otherBus) use.otherBus.push({ vm, key });
    }
  }
  return (storage, disk) => byDisk.get(`${storage}\u0000${disk}`) ?? { sites: [], unused: [], otherBus: [] };
}
