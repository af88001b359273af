// The driver's helper VMs of thin copies (docs/snapshots.md: copy, snapshot and volume VMs) as
// `report` sees them, and what is a provable leftover among them. A VM is one of ours only with
// our name and a record of this controller (copy-vms.ts); each is judged from its config, its
// snapshot sections and the volumes its VMID owns on the storages of its host. The same judge runs
// on the scan (findings) and again on a read taken right before --fix acts (fix.ts), so what
// changed in between (a retry that re-made a copy VM of the same VMID, a clone that appeared) is
// kept. What is removed goes through the ownership gate's copy permits (decideCopyStep).
import { isCsiError } from '../../errors.js';
import type {
  ConfigEntry,
  ProxmoxReadApi,
  StorageContentItem,
  StorageResource,
  VmResource,
} from '../../proxmox/api/api.js';
import { volidOfValue } from '../../proxmox/mover-vm.js';
import {
  COPY_VM_NAMES,
  type CopyRecord,
  type CopyStep,
  parseRecord,
} from '../../proxmox/controller/safety/copy-vms.js';
import { diskOwner, parseVolid } from '../../proxmox/volume-id.js';
import { isMarkerName } from '../../proxmox/marker-name.js';

export interface HelperDisk {
  storage: string;
  disk: string;
  volid: string;
  size: number;
  createdAt?: number;
}

export interface HelperFact {
  vm: VmResource;
  record: CopyRecord;
  entries: ConfigEntry[];
  /** Its snapshot sections (a copy VM's temporary snapshot). */
  snapshots: string[];
  /** The volumes its VMID owns on the storages of its host; undefined when one could not be listed. */
  owned: HelperDisk[] | undefined;
}

/**
 * The longest a copy VM lives while its copy runs: it is made and removed within one
 * CreateSnapshot or CreateVolume (create, hold, snapshot, clone, unsnapshot, destroy: each a task
 * waited up to 120 s, plus lock waits). One older than this is what a killed controller left.
 */
export const COPY_VM_STALE_MS = 30 * 60_000;

const isHelperName = (name: string) => Object.values(COPY_VM_NAMES).includes(name);

/** The VM's record when it is one of our helper VMs (name and record of this controller). */
export function helperRecord(vm: VmResource, entries: readonly ConfigEntry[], controllerVmId: number) {
  if (!isHelperName(vm.name)) return undefined;
  const r = parseRecord(entries.find((e) => e.key === 'description')?.value);
  return r && r.controller === controllerVmId && COPY_VM_NAMES[r.role] === vm.name ? r : undefined;
}

type Lister = (node: string, storage: string) => Promise<StorageContentItem[]>;

/** The volumes `vmid` owns among a storage listing's items. */
const ownedIn = (items: readonly StorageContentItem[], vmid: number): HelperDisk[] =>
  items.flatMap((item) => {
    const ref = parseVolid(item.volid);
    if (!ref || diskOwner(ref.disk) !== vmid) return [];
    return [
      {
        storage: ref.storage,
        disk: ref.disk,
        volid: item.volid,
        size: item.size,
        ...(item.ctime !== undefined && { createdAt: item.ctime * 1000 }),
      },
    ];
  });

async function factsOf(
  api: ProxmoxReadApi,
  list: Lister,
  vm: VmResource,
  entries: ConfigEntry[],
  record: CopyRecord,
  storages: readonly StorageResource[],
  signal?: AbortSignal,
): Promise<HelperFact> {
  // Only a copy VM is ever snapshotted; a snapshot or volume VM with a section is judged by its config.
  let snapshots: string[] = [];
  if (record.role === 'copy')
    try {
      snapshots = await api.vmSnapshots(vm.node, vm.vmid, { signal });
    } catch (e) {
      if (!isCsiError(e, 'NotFound')) throw e;
    }
  let owned: HelperDisk[] | undefined = [];
  for (const storage of new Set(storages.filter((s) => s.node === vm.node).map((s) => s.storage))) {
    try {
      owned.push(...ownedIn(await list(vm.node, storage), vm.vmid));
    } catch {
      owned = undefined;
      break;
    }
  }
  return { vm, record, entries, snapshots, owned };
}

/** Reads one helper VM's facts now (its entries read by the caller): --fix's re-check. */
export function readHelper(
  api: ProxmoxReadApi,
  vm: VmResource,
  entries: ConfigEntry[],
  record: CopyRecord,
  storages: readonly StorageResource[],
  signal?: AbortSignal,
): Promise<HelperFact> {
  const list: Lister = (node, storage) => api.listContent(node, storage, vm.vmid, { signal });
  return factsOf(api, list, vm, entries, record, storages, signal);
}

/**
 * Every helper VM of this controller in the scan. Each storage of a host with helper VMs is
 * listed once for all of them (the metrics run this on every refresh: the cost grows with the
 * storages, not with the snapshots).
 */
export async function readHelpers(
  api: ProxmoxReadApi,
  scan: ReadonlyArray<{ vm: VmResource; entries: ConfigEntry[] }>,
  storages: readonly StorageResource[],
  controllerVmId: number,
  signal?: AbortSignal,
): Promise<HelperFact[]> {
  const listings = new Map<string, Promise<StorageContentItem[]>>();
  const list: Lister = (node, storage) => {
    const key = `${node}\u0000${storage}`;
    let p = listings.get(key);
    if (!p) listings.set(key, (p = api.listContent(node, storage, undefined, { signal })));
    return p;
  };
  const out: HelperFact[] = [];
  for (const { vm, entries } of scan) {
    const record = helperRecord(vm, entries, controllerVmId);
    if (record) out.push(await factsOf(api, list, vm, entries, record, storages, signal));
  }
  return out.sort((a, b) => a.vm.vmid - b.vm.vmid);
}

/** What a helper VM is, as report says it. */
export type HelperVerdict =
  /** Healthy: a CSI snapshot (kept, listed for information). */
  | { state: 'snapshot'; clone: HelperDisk; detail: string }
  /** Healthy: a restored volume, released (its disk is judged like a volume: findings.ts). */
  | { state: 'volume'; disk: HelperDisk; detail: string }
  /** A leftover --fix may remove (the VM; a copy VM's snapshot first). */
  | { state: 'leftover'; detail: string }
  /** Something to look at, left alone. */
  | { state: 'kept'; detail: string; kept: string };

const drive0 = (h: HelperFact) => {
  const e = h.entries.find((x) => x.key === 'scsi0');
  return e?.value !== undefined ? volidOfValue('scsi0', e.value) : undefined;
};

/** Judges one helper VM from its facts (pure: the findings and the fix's re-check use it alike). */
export function judgeHelper(h: HelperFact, now: number): HelperVerdict {
  const r = h.record;
  const lock = h.entries.find((e) => e.key === 'lock')?.value;
  const age = now - r.created * 1000;
  const held = drive0(h);
  const snaps = h.snapshots.length ? `, with its temporary snapshot ${h.snapshots.join(', ')}` : '';
  const unusable = (detail: string): HelperVerdict =>
    lock
      ? {
          state: 'kept',
          detail,
          kept: `it is locked (${lock}): a Proxmox task on it may still run (root clears a stale lock)`,
        }
      : h.vm.status === 'running'
        ? { state: 'kept', detail, kept: 'it is running, which the driver never does: look at it by hand' }
        : { state: 'leftover', detail };
  switch (r.role) {
    case 'copy': {
      const detail = `copy VM of ${r.name} (source ${r.source})${snaps}, made ${Math.round(age / 1000)} s ago`;
      if (age < COPY_VM_STALE_MS)
        return {
          state: 'kept',
          detail,
          kept: `younger than ${COPY_VM_STALE_MS / 60_000} min: a snapshot, restore or clone may be under way`,
        };
      return unusable(`${detail}: left by an interrupted copy (a copy VM never outlives its call)`);
    }
    case 'snapshot': {
      if (h.owned === undefined)
        return { state: 'kept', detail: `snapshot VM of ${r.name}`, kept: 'its storage could not be listed' };
      const clone = h.owned.find((d) => d.volid === held);
      if (clone) return { state: 'snapshot', clone, detail: `CSI snapshot ${r.name} of ${r.source}` };
      return unusable(
        `snapshot VM of ${r.name} without its clone (${held ? `${held} does not exist` : 'no scsi0'}): nothing can be restored from it`,
      );
    }
    case 'volume': {
      if (held)
        return {
          state: 'kept',
          detail: `volume VM of ${r.name} still holding its clone ${held} as scsi0 (a restore or clone interrupted before it let go)`,
          kept: `CreateVolume ${r.name} finishes it when retried; if the claim is gone, delete the VM by hand`,
        };
      if (h.owned === undefined)
        return { state: 'kept', detail: `volume VM of ${r.name}`, kept: 'its storage could not be listed' };
      const disk = h.owned.find((d) => /^vm-\d+-disk-\d+$/.test(d.disk));
      if (disk) return { state: 'volume', disk, detail: `restored volume ${r.name} (from ${r.source})` };
      const other = h.owned.find((d) => !isMarkerName(d.disk));
      if (other)
        return {
          state: 'kept',
          detail: `volume VM of ${r.name} owning ${other.volid}`,
          kept: 'it owns a volume that is not its restored disk',
        };
      return unusable(
        `volume VM of ${r.name} whose disk is gone (a DeleteVolume interrupted between freeing the disk and destroying the VM)`,
      );
    }
  }
}

/** The part of the controller's copy machinery a removal uses (thin-copy.ts runStep). */
export interface HelperRemoval {
  api: ProxmoxReadApi;
  storages: () => Promise<StorageResource[]>;
  /** Sends one copy step through the ownership gate (decided on a fresh read) and waits for it. */
  step: (s: CopyStep) => Promise<void>;
  controllerVmId: number;
  signal?: AbortSignal;
  /** The clock the re-check judges with (report's own `now`). */
  now: () => number;
}

/**
 * report --fix: removes a leftover helper VM after judging it again on a read taken now. It must
 * still be the VM that was judged (same record creation time: a retry may have re-made a copy VM
 * of the same VMID) and still a leftover; a copy VM's snapshot goes first, then a volume VM's
 * markers, then the VM. Each call is a copy permit of the gate.
 */
export async function removeHelperVm(
  x: HelperRemoval,
  at: { node: string; vmid: number; created: number },
): Promise<string> {
  const vm = (await x.api.vmResources({ signal: x.signal })).find((v) => v.vmid === at.vmid && v.node === at.node);
  if (!vm) return 'already gone';
  const entries = await x.api.vmPending(vm.node, vm.vmid, { signal: x.signal });
  const record = helperRecord(vm, entries, x.controllerVmId);
  if (record?.created !== at.created)
    throw new Error(`left alone: VM ${at.vmid} is no longer the helper VM that was judged`);
  const h = await readHelper(x.api, vm, entries, record, await x.storages(), x.signal);
  const v = judgeHelper(h, x.now());
  if (v.state !== 'leftover') throw new Error(`left alone: ${v.detail}${'kept' in v ? `; ${v.kept}` : ''}`);
  const { node, vmid } = at;
  for (const snapname of h.snapshots) await x.step({ op: 'unsnapshot', node, vmid, snapname });
  if (record.role === 'volume')
    for (const m of h.owned ?? []) await x.step({ op: 'free', node, vmid, storage: m.storage, volid: m.volid });
  await x.step({ op: 'destroy', node, vmid });
  return 'removed';
}
