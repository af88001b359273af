// The read a destructive ownership decision takes (ownership.ts: free, grow): every QEMU VM of
// the disk's hosts from a VM list read now, each one's config and pending section
// (GET …/pending, recorded in the disk index) and each one's snapshot sections (GET …/snapshot,
// then GET …/config?snapshot=NAME per snapshot). Nothing comes from a cache: a disk attached by
// hand a second ago, or kept by a snapshot, must keep its data. The snapshot list is read for
// every VM, not only for those whose config names a `parent`: deleting a VM's root snapshot
// after a rollback to it drops `parent` while a later branch remains
// (PVE::AbstractConfig::snapshot_delete), and that branch's drive lines still hold disks.
import { isCsiError } from '../../../errors.js';
import type { ConfigEntry, ProxmoxReadApi, VmResource } from '../../api/api.js';
import type { Cluster } from '../state/cluster.js';
import type { VmEntries } from '../state/scan.js';
import type { FreshView, SnapshotSection } from './ownership.js';
import { mapLimit } from '../../../map-limit.js';

/** `nodes`: the disk's hosts (undefined: every node, for a shared storage). */
export function readFresh(
  cluster: Cluster,
  nodes: readonly string[] | undefined,
  signal?: AbortSignal,
): Promise<FreshView> {
  // Each VM's entries through the disk index, which records them for the controller's later reads.
  return readFreshWith(cluster.api, (vm) => cluster.index.read(vm, signal), nodes, signal);
}

/** The same read without a controller (the day-2 commands): each VM's pending section directly. */
export function readFreshOf(
  api: ProxmoxReadApi,
  nodes: readonly string[] | undefined,
  signal?: AbortSignal,
): Promise<FreshView> {
  const entriesOf = async (vm: VmResource) => {
    try {
      return await api.vmPending(vm.node, vm.vmid, { signal });
    } catch (e) {
      if (isCsiError(e, 'NotFound')) return undefined; // deleted or migrated since the list was read
      throw e;
    }
  };
  return readFreshWith(api, entriesOf, nodes, signal);
}

async function readFreshWith(
  api: ProxmoxReadApi,
  entriesOf: (vm: VmResource) => Promise<ConfigEntry[] | undefined>,
  nodes: readonly string[] | undefined,
  signal?: AbortSignal,
): Promise<FreshView> {
  // Templates too (the locator leaves them out): a template's config can hold a disk as well.
  const vms = (await api.vmResources({ signal })).filter(
    (v) => v.type === 'qemu' && (!nodes || nodes.includes(v.node)),
  );
  const read = await mapLimit(vms, 8, async (vm) => {
    const [entries, sections] = await Promise.all([entriesOf(vm), snapshotsOf(api, vm, signal)]);
    return entries && { vm, entries, sections };
  });
  const present = read.filter((r): r is VmEntries & { sections: SnapshotSection[] } => r !== undefined);
  return {
    fresh: true,
    vms: present.map((r) => r.vm),
    entries: present.map(({ vm, entries }) => ({ vm, entries })),
    snapshots: new Map(present.map((r) => [r.vm.vmid, r.sections])),
  };
}

async function snapshotsOf(api: ProxmoxReadApi, vm: VmResource, signal?: AbortSignal): Promise<SnapshotSection[]> {
  try {
    const names = await api.vmSnapshots(vm.node, vm.vmid, { signal });
    return await Promise.all(
      names.map(async (name) => ({
        name,
        values: await api.vmSnapshotConfig(vm.node, vm.vmid, name, { signal }),
      })),
    );
  } catch (e) {
    // Deleted or migrated since the list was read: its entries read says so too (and wins).
    if (isCsiError(e, 'NotFound')) return [];
    throw e;
  }
}
