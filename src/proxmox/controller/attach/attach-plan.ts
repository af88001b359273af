// The attach queue's decisions, as pure functions of what a VM's config and pending section say
// (and, for exclusivity, what the other VMs' say): which jobs are already done, which are
// refused and why, which scsiN to set, which leftovers to delete, what to unlink first. No API,
// no time, no I/O: the queue (attach-queue.ts) reads state (vm-state.ts), calls plan…(), has
// the executor (attach-exec.ts) send what it says and reads back. Tested with plain tables
// (test/unit/proxmox/controller/attach/attach-plan.test.ts).
import { AlreadyExists, Busy, FailedPrecondition, ResourceExhausted, Unavailable } from '../../../errors.js';
import type { ConfigEntry } from '../../api/api.js';
import {
  type DiskSite,
  driveHasOptions,
  freeSlots,
  isDriverSite,
  isHelperSite,
  sitesOf as allSitesOf,
  unusedOf,
  withDriveOptions,
} from '../state/drives.js';
import { type DriveOptions, driveString } from '../params/params.js';
import { helperWwnForSlot, wwnForSlot } from '../../contract.js';
import { type VmEntries, usesOf } from '../state/scan.js';
import { OwnershipRefusal, attachConflict, describeRef, foreignRefsOn } from '../safety/ownership.js';
import type { VmRef } from '../state/vm-locator.js';
import { diskOwner, volidOf } from '../../volume-id.js';

export interface AttachRequest {
  storage: string;
  disk: string;
  /** Proxmox node whose storage holds the disk. */
  diskNode: string;
  /**
   * Hosts whose VMs can hold the disk, when more than the disk's own: every host of a shared
   * storage (a VM on any of them can have it attached). The exclusivity checks read them all.
   */
  holderNodes?: readonly string[] | undefined;
  options: DriveOptions;
  /** Refuse when another VM has the disk (single-node access modes). */
  exclusive: boolean;
  /**
   * An offline-expansion helper attachment (helper WWN) rather than a publish. Each kind treats
   * the other's attachment of the same disk on the VM as an obstacle: a publish unlinks a helper
   * left over by a crash, a helper refuses to touch a publish.
   */
  helper?: boolean | undefined;
}

export interface DetachRequest {
  storage: string;
  disk: string;
}

/** New option values for the disk's drive line(s) on this VM (a VolumeAttributesClass change). */
export interface UpdateRequest {
  storage: string;
  disk: string;
  /** Options to set; undefined removes one. */
  options: Record<string, string | undefined>;
}

/**
 * An exclusive publish found only offline-expansion helper attachments of its disk on other
 * VMs: leftovers the caller can remove (through those VMs' queues) and then publish again.
 */
export class HelperLeftovers extends FailedPrecondition {
  constructor(
    message: string,
    readonly vms: VmRef[],
  ) {
    super(message);
  }
}

export const what = (vm: VmRef): string => `VM ${vm.name} (${vm.vmid}) on ${vm.node}`;

/**
 * The disk's places on the VM that this driver may touch. A place it cannot have made (see
 * isDriverSite) is never read as "published", rewritten or unlinked.
 */
export function driverSites(entries: readonly ConfigEntry[], storage: string, disk: string, vmid: number): DiskSite[] {
  return allSitesOf(entries, storage, disk).filter((s) => isDriverSite(s, vmid, diskOwner(disk)));
}

/** The disk's places on the VM that are the VM's own (boot disk, disks attached by hand…). */
export function foreignKeysOf(entries: readonly ConfigEntry[], storage: string, disk: string, vmid: number): string[] {
  return [...new Set(foreignRefsOn({ vmid, node: '', name: '' }, entries, { storage, disk }).map((r) => r.key))];
}

export const notOurs = (storage: string, disk: string, vm: VmRef, keys: string[]): Error =>
  new FailedPrecondition(
    `${volidOf(storage, disk)} is on VM ${vm.name} (${vm.vmid}) as ${keys.join(', ')}, which this driver did not attach (the VM's own disk or one attached by hand); it is never published to, changed on or detached from that VM by the driver`,
  );

/** Whether the VM applies a disk change at once (qemu-server `hotplug`, default network,disk,usb). */
export function hotplugsDisks(entries: readonly ConfigEntry[]): boolean {
  const e = entries.find((x) => x.key === 'hotplug');
  const v = e?.value ?? '1';
  if (e?.pending !== undefined || e?.pendingDelete) return false;
  if (v === '1') return true;
  return v
    .split(',')
    .map((s) => s.trim())
    .includes('disk');
}

// ---- attach ----

/** The attachment of the disk on this VM that satisfies the request, if one is there. */
export function attachedFor(vmid: number, entries: readonly ConfigEntry[], req: AttachRequest): DiskSite | undefined {
  return driverSites(entries, req.storage, req.disk, vmid).find(
    (s) => s.placement === 'attached' && isHelperSite(s) === !!req.helper,
  );
}

/** Sites of the disk on this VM that must be unlinked before the request can be attached. */
export function obstacles(vmid: number, entries: readonly ConfigEntry[], req: AttachRequest): DiskSite[] {
  return driverSites(entries, req.storage, req.disk, vmid).filter(
    (s) => s.placement === 'detaching' || isHelperSite(s) !== !!req.helper,
  );
}

export type Found =
  | {
      kind: 'attached';
      slot: number;
      /** the drive's WWN is not its slot's (attached by hand?) */ oddWwn?: string | undefined;
    }
  | { kind: 'reject'; error: Error };

/** What an attachment found on the VM means for the request: done, or a conflict. */
export function judgeAttached(vm: VmRef, req: AttachRequest, site: DiskSite): Found {
  if (req.helper) return { kind: 'attached', slot: site.slot };
  const ro = site.drive.options.ro === '1' || site.drive.options.ro === 'on';
  if (ro !== req.options.readonly) {
    return {
      kind: 'reject',
      error: new AlreadyExists(
        `${volidOf(req.storage, req.disk)} is already published to ${what(vm)} with readonly=${ro}; unpublish it first`,
      ),
    };
  }
  const wwn = site.drive.options.wwn;
  return wwn && wwn.toLowerCase() !== wwnForSlot(site.slot)
    ? { kind: 'attached', slot: site.slot, oddWwn: wwn }
    : { kind: 'attached', slot: site.slot };
}

/** What is already decided for each request from the VM's entries alone (undefined: still open). */
export function settle(
  vm: VmRef,
  entries: readonly ConfigEntry[],
  reqs: readonly AttachRequest[],
): Array<Found | undefined> {
  return reqs.map((req) => {
    const foreign = foreignKeysOf(entries, req.storage, req.disk, vm.vmid);
    if (foreign.length) return { kind: 'reject', error: notOurs(req.storage, req.disk, vm, foreign) };
    const site = attachedFor(vm.vmid, entries, req);
    return site ? judgeAttached(vm, req, site) : undefined;
  });
}

export interface AttachPlan {
  /** scsiN → drive line: one config change for every request that can go now. */
  set: Record<string, string>;
  /** unusedN leftovers of these disks (never an unused entry the VM itself owns). */
  delete: string[];
  /** Sites to unlink first (pending detaches, the other kind's attachment); their requests wait. */
  unlink: string[];
  /** Request index → the slot its drive line goes to. */
  assigned: Map<number, number>;
  /** Request index → why it is refused. */
  rejects: Map<number, Error>;
}

/** Plans one config change for the open requests: first free slots in order, leftovers cleaned. */
export function planAttach(vm: VmRef, entries: readonly ConfigEntry[], reqs: readonly AttachRequest[]): AttachPlan {
  const plan: AttachPlan = { set: {}, delete: [], unlink: [], assigned: new Map(), rejects: new Map() };
  const free = freeSlots(entries);
  reqs.forEach((req, i) => {
    const sites = driverSites(entries, req.storage, req.disk, vm.vmid);
    const leaving = obstacles(vm.vmid, entries, req);
    if (req.helper && leaving.some((s) => !isHelperSite(s) && s.placement !== 'detaching')) {
      plan.rejects.set(
        i,
        new Busy(
          `${volidOf(req.storage, req.disk)} is being published to ${what(vm)}; not expanding it through a helper attachment now`,
        ),
      );
      return;
    }
    if (leaving.length) {
      for (const s of leaving) if (!plan.unlink.includes(s.key)) plan.unlink.push(s.key);
      return;
    }
    const slot = sites.find((s) => s.placement === 'attaching')?.slot ?? free.shift();
    if (slot === undefined) {
      plan.rejects.set(
        i,
        new ResourceExhausted(`no free SCSI slot on ${what(vm)}: scsi1..scsi30 are all in use or pending`),
      );
      return;
    }
    plan.set[`scsi${slot}`] = driveString(
      req.storage,
      req.disk,
      req.options,
      req.helper ? helperWwnForSlot(slot) : wwnForSlot(slot),
    );
    if (diskOwner(req.disk) !== vm.vmid) plan.delete.push(...unusedOf(entries, req.storage, req.disk));
    plan.assigned.set(i, slot);
  });
  return plan;
}

/** After a change was sent: attached, still pending (hot-plug did not complete), or gone (not landed). */
export function attachOutcome(
  vm: VmRef,
  entries: readonly ConfigEntry[],
  req: AttachRequest,
  slot: number | undefined,
): Found | { kind: 'pending' } | { kind: 'absent' } {
  const site = attachedFor(vm.vmid, entries, req);
  if (site) return judgeAttached(vm, req, site);
  if (driverSites(entries, req.storage, req.disk, vm.vmid).some((s) => s.placement === 'attaching')) {
    return {
      kind: 'reject',
      error: new Unavailable(
        `hot-plug of ${volidOf(req.storage, req.disk)} into ${what(vm)} did not complete; it stays a pending change of scsi${slot ?? '?'}`,
      ),
    };
  }
  return { kind: 'absent' };
}

/**
 * Why another VM's reference to the disk forbids attaching it (exclusive), or undefined: the
 * ownership gate's attachConflict (any key of any bus, unusedN, pending), with helper leftovers
 * told apart as removable.
 */
export function conflictOf(
  scan: readonly VmEntries[],
  req: Pick<AttachRequest, 'storage' | 'disk'>,
): Error | undefined {
  const volid = volidOf(req.storage, req.disk);
  const c = attachConflict(scan, req);
  if (c) {
    const why = c.driverSite
      ? 'a single-node volume is published to one node at a time'
      : 'a disk another VM config references is never attached elsewhere';
    return new OwnershipRefusal('referenced', `${volid} is ${describeRef(c)}; ${why}`);
  }
  const use = usesOf(scan, req.storage, req.disk);
  if (use.sites.length > 0) {
    const vms = [
      ...new Map(use.sites.map((s) => [s.vm.vmid, { vmid: s.vm.vmid, node: s.vm.node, name: s.vm.name }])).values(),
    ];
    return new HelperLeftovers(
      `${volid} is still attached to ${vms.map((v) => `VM ${v.name} (${v.vmid})`).join(', ')} by an interrupted offline expansion; remove that attachment first`,
      vms,
    );
  }
  return undefined;
}

/** VMs of a scan that hold the disk in any way (sites, other buses): the ones a conflict names. */
export function holdersOf(scan: readonly VmEntries[], req: Pick<AttachRequest, 'storage' | 'disk'>): number[] {
  const use = usesOf(scan, req.storage, req.disk);
  return [...new Set([...use.sites, ...use.otherBus, ...use.unused].map((u) => u.vm.vmid))];
}

// ---- detach ----

/** Keys to unlink for the disk: its driver sites, and unusedN leftovers unless the VM owns the disk. */
export function detachKeys(vmid: number, entries: readonly ConfigEntry[], req: DetachRequest): string[] {
  return [
    ...driverSites(entries, req.storage, req.disk, vmid).map((s) => s.key),
    // Deleting unusedN frees the disk when this VM owns it; only drop foreign leftovers.
    ...(diskOwner(req.disk) !== vmid ? unusedOf(entries, req.storage, req.disk) : []),
  ];
}

/**
 * Whether a successful synchronous unlink of these keys, sent with the digest of these entries,
 * proves them gone, so no read-back is needed. qemu-server (update_vm_api under the config lock,
 * digest checked there): an `unusedN` is dropped from the config at once (a disk the VM does not
 * own is never freed); a drive's delete is applied on a stopped VM, and on a running one
 * vmconfig_hotplug_pending unplugs it (device_del, then qemu_devicedelverify until QEMU no
 * longer lists it) and drops the key, or answers 400 `hotplug problem - …`. It skips silently,
 * leaving the delete pending, only when `hotplug` lacks `disk` or for ide/sata/efidisk/tpmstate:
 * then the delete is read back.
 */
export function unlinkVerified(entries: readonly ConfigEntry[], keys: readonly string[]): boolean {
  return hotplugsDisks(entries) && keys.every((k) => /^(scsi|virtio|unused)\d+$/.test(k));
}

export interface DetachPlan {
  /** One unlink for every request still on the VM. */
  unlink: string[];
  /** Request indexes already gone from the VM. */
  done: number[];
  rejects: Map<number, Error>;
}

export function planDetach(vm: VmRef, entries: readonly ConfigEntry[], reqs: readonly DetachRequest[]): DetachPlan {
  const plan: DetachPlan = { unlink: [], done: [], rejects: new Map() };
  reqs.forEach((req, i) => {
    const foreign = foreignKeysOf(entries, req.storage, req.disk, vm.vmid);
    if (foreign.length) return void plan.rejects.set(i, notOurs(req.storage, req.disk, vm, foreign));
    const keys = detachKeys(vm.vmid, entries, req);
    if (keys.length === 0) return void plan.done.push(i);
    for (const k of keys) if (!plan.unlink.includes(k)) plan.unlink.push(k);
  });
  return plan;
}

// ---- update (VolumeAttributesClass) ----

export const updateSites = (vmid: number, entries: readonly ConfigEntry[], req: UpdateRequest): DiskSite[] =>
  driverSites(entries, req.storage, req.disk, vmid).filter((s) => !isHelperSite(s));

export interface UpdatePlan {
  set: Record<string, string>;
  done: number[];
  rejects: Map<number, Error>;
}

export function planUpdate(vm: VmRef, entries: readonly ConfigEntry[], reqs: readonly UpdateRequest[]): UpdatePlan {
  const plan: UpdatePlan = { set: {}, done: [], rejects: new Map() };
  reqs.forEach((req, i) => {
    const foreign = foreignKeysOf(entries, req.storage, req.disk, vm.vmid);
    if (foreign.length) return void plan.rejects.set(i, notOurs(req.storage, req.disk, vm, foreign));
    const sites = updateSites(vm.vmid, entries, req);
    const moving = sites.find((s) => s.placement !== 'attached');
    if (moving) {
      return void plan.rejects.set(
        i,
        new Unavailable(
          `${volidOf(req.storage, req.disk)} is ${moving.placement === 'attaching' ? 'being attached to' : 'being detached from'} ${what(vm)} (${moving.key} has a pending change); retrying later`,
        ),
      );
    }
    const stale = sites.filter((s) => !driveHasOptions(s.drive, req.options));
    if (stale.length === 0) return void plan.done.push(i);
    for (const s of stale)
      plan.set[s.key] = withDriveOptions(entries.find((e) => e.key === s.key)?.value ?? '', req.options);
  });
  return plan;
}

/** The new options landed on every site of the disk. */
export const updateLanded = (vmid: number, entries: readonly ConfigEntry[], req: UpdateRequest): boolean =>
  updateSites(vmid, entries, req).every((s) => s.placement === 'attached' && driveHasOptions(s.drive, req.options));
