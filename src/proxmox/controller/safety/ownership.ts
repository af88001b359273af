// The ownership gate of the Proxmox driver: the one place that decides whether a call may free,
// grow, re-line, attach or detach a disk, from the disk's name and what the VM configs say about
// it (docs/ownership.md, "Proxmox: what the driver frees, grows, changes and attaches"). Every
// decision is a pure function of its inputs; an allowed one hands out an OwnershipPermit
// (permit.ts), which only this module and its day-2 half (ownership-day2.ts) make and which the
// mutating port (ownership-port.ts) demands for each call that changes Proxmox: freeing or
// allocating a volume, resizing a disk, changing or unlinking drive keys of a VM. A refusal
// costs nothing: it comes before any of those.
//
// Which reads each decision takes (what the callers pass in):
// - free and grow: a fresh read (fresh-read.ts: the VM list, every VM's config and pending
//   section, every snapshot section, all read at decision time). Destructive or putting a disk
//   on a helper VM: a cache could miss a disk attached by hand seconds ago.
// - modify: the VMs' config and pending sections read at decision time (no snapshot sections:
//   only current drive lines are rewritten).
// - attach: the other VMs as the disk index has them (cached up to its TTL, holders re-read),
//   re-checked after landing; the target VM's config is read at change time, and the change
//   carries that read's digest, so Proxmox refuses it when the config moved on.
// - config change, unlink and resize of one VM: that VM's entries of the read the change was
//   planned on, whose digest the change carries (verified by Proxmox on the write path).
import { FailedPrecondition } from '../../../errors.js';
import type { ConfigChange, ConfigEntry, VmResource } from '../../api/api.js';
import { MAX_SLOT, MIN_SLOT, isHelperWwn } from '../../contract.js';
import { MARKER_BYTES, parseMarker } from '../params/mutable.js';
import { type DiskSite, isDriverSite, parseDrive, slotOf } from '../state/drives.js';
import type { VmEntries } from '../state/scan.js';
import type { VmRef } from '../state/vm-locator.js';
import { diskOwner, volidOf } from '../../volume-id.js';
import { allocFilename, formatOfVolname } from '../../storage/kind.js';
import { type OwnershipPermit, mintPermit } from './permit.js';
import { type CopyStep, type CopyView, copyStepProblem, ourVolumeVm } from './copy-vms.js';

// ---- permits (permit.ts) ----

export { OwnershipPermit } from './permit.js';
const mint = mintPermit;

// ---- refusals ----

export type RefusalReason =
  /** not a disk the driver names (`vm-<controllerVmID>-<pv name>`) */
  | 'not-driver-disk'
  /** the owner VMID in the name belongs to no VM */
  | 'orphan-owner'
  /** the disk is the target VM's own */
  | 'own-vm'
  /** a VM config key the driver did not write references the disk */
  | 'referenced'
  /** a change would touch a key that is not one of the driver's drive lines */
  | 'foreign-key'
  /** day-2: a PersistentVolume names the disk */
  | 'claimed'
  /** move: the VM is not the helper the config allows (the controller VMID, named as move names it) */
  | 'not-our-helper'
  /** move: the helper is not in the state this step needs (locked, running, holding other volumes) */
  | 'helper-state';

/** FAILED_PRECONDITION with why; the message names the VM and the config key where there is one. */
export class OwnershipRefusal extends FailedPrecondition {
  constructor(
    readonly reason: RefusalReason,
    message: string,
  ) {
    super(message);
  }
}

export const isOwnershipRefusal = (e: unknown): e is OwnershipRefusal => e instanceof OwnershipRefusal;

// ---- what a disk is ----

export type DiskClass = 'driver' | 'proxmox' | 'marker' | 'foreign';
// Names Proxmox gives a VM's own volumes (PVE::Storage::Plugin find_free_diskname, cloud-init
// and vmstate volumes): never made by CreateVolume, whose names are `vm-<id>-<pv name>`.
const PROXMOX_OWN_RE = /^(?:disk-\d+|cloudinit|state-.*)$/;

/** Whether the disk is of the driver's naming scheme (owned by its controller VMID). */
export function classify(disk: string, controllerVmId: number): DiskClass {
  if (parseMarker(disk)) return 'marker';
  if (diskOwner(disk) !== controllerVmId) return 'foreign';
  // A file storage's volume name is `<vmid>/vm-<vmid>-<name>.<format>` (storage/file.ts).
  const name = allocFilename(disk).replace(/\.(?:raw|qcow2)$/, '');
  return PROXMOX_OWN_RE.test(name.slice(`vm-${controllerVmId}-`.length)) ? 'proxmox' : 'driver';
}

/**
 * Whether the gate may free, grow or re-line the disk: a disk of the driver's scheme, or a
 * restored or cloned volume whose owner is one of our volume VMs in `view` (read at decision
 * time: copy-vms.ts ourVolumeVm). Markers, Proxmox's names of the controller VMID's disks and
 * every other disk are not.
 */
function isOurDisk(d: DiskFacts, view: Pick<HostView, 'entries'> | undefined): boolean {
  const c = classify(d.disk, d.controllerVmId);
  return c === 'driver' || (c === 'foreign' && !!view && !!ourVolumeVm(view.entries, d.disk, d.controllerVmId));
}

export interface DiskFacts {
  storage: string;
  disk: string;
  controllerVmId: number;
}

const volid = (d: Pick<DiskFacts, 'storage' | 'disk'>) => volidOf(d.storage, d.disk);
const vmText = (vm: VmRef) => `VM ${vm.name} (${vm.vmid}) on ${vm.node}`;
const asRef = (v: VmRef | VmResource): VmRef => ({ vmid: v.vmid, node: v.node, name: v.name });

type Verb = 'free' | 'grow' | 'change' | 'attach';

function notDriverDisk(d: DiskFacts, verb: Verb, vms: readonly VmResource[] | undefined): OwnershipRefusal {
  const owner = diskOwner(d.disk);
  const scheme = `this driver ${verb === 'attach' ? 'attaches' : `${verb}s`} only disks of its own, named vm-${d.controllerVmId}-<pv name> (or restored from its snapshots)`;
  if (classify(d.disk, d.controllerVmId) === 'proxmox')
    return new OwnershipRefusal(
      'not-driver-disk',
      `refusing to ${verb} ${volid(d)}: that is Proxmox's own name for a disk of VM ${owner}, not one this driver creates; ${scheme}`,
    );
  const vm = vms?.find((v) => v.vmid === owner);
  const whose = vm
    ? `it belongs to VM ${vm.name} (${vm.vmid})`
    : vms
      ? `its owner VM ${owner ?? '?'} does not exist (a disk left by a destroyed VM or made by hand; a new VM ${owner ?? '?'} would own it and free it with itself)`
      : `it is not a disk of this driver`;
  return new OwnershipRefusal(
    vm || !vms ? 'not-driver-disk' : 'orphan-owner',
    `refusing to ${verb} ${volid(d)}: ${whose}; ${scheme}`,
  );
}

// ---- references ----

export type RefWhere = 'config' | 'pending' | 'pending-delete' | 'unused' | 'snapshot';

export interface Reference {
  vm: VmRef;
  key: string;
  where: RefWhere;
  snapshot?: string | undefined;
  /** A drive line this driver (or upstream) can have written: scsi1..30, its WWN scheme. */
  driverSite: boolean;
  /** An offline-expansion helper attachment (its WWN). */
  helper: boolean;
}

/** A VM's snapshot sections (`[name]` in its config file), as fresh-read.ts reads them. */
export interface SnapshotSection {
  name: string;
  values: Record<string, string>;
}

export interface HostView {
  /** Every QEMU VM of the hosts the disk can be referenced on. */
  vms: readonly VmResource[];
  entries: readonly VmEntries[];
  /** Per VMID; only fresh views have them. */
  snapshots?: ReadonlyMap<number, readonly SnapshotSection[]> | undefined;
}

/** A view read at decision time, snapshot sections included (fresh-read.ts). */
export interface FreshView extends HostView {
  fresh: true;
  snapshots: ReadonlyMap<number, readonly SnapshotSection[]>;
}

// Every config key that can hold a volume (qemu-server: drive buses, unusedN, vmstate).
const VOLUME_KEY_RE = /^(?:ide|sata|scsi|virtio|efidisk|tpmstate|unused)\d+$|^vmstate$/;

const refersTo = (raw: string | undefined, d: Pick<DiskFacts, 'storage' | 'disk'>): boolean => {
  if (raw === undefined) return false;
  const drive = parseDrive(raw);
  return !!drive && drive.storage === d.storage && drive.disk === d.disk;
};

function classifyRef(vm: VmRef, key: string, raw: string, where: RefWhere): Omit<Reference, 'snapshot'> {
  const slot = slotOf(key);
  const drive = parseDrive(raw);
  const site: DiskSite | undefined =
    slot !== undefined && drive ? { key, slot, placement: 'attached', drive } : undefined;
  const driverSite = !!site && where !== 'unused' && isDriverSite(site, vm.vmid, diskOwner(site.drive.disk));
  return { vm, key, where, driverSite, helper: driverSite && isHelperWwn(drive?.options.wwn) };
}

/** One VM's references to the disk in its current config and pending section. */
export function entryRefs(
  vm: VmRef,
  entries: readonly ConfigEntry[],
  d: Pick<DiskFacts, 'storage' | 'disk'>,
): Reference[] {
  const out: Reference[] = [];
  for (const e of entries) {
    if (!VOLUME_KEY_RE.test(e.key)) continue;
    const unused = e.key.startsWith('unused');
    if (refersTo(e.value, d) && e.value !== undefined)
      out.push(classifyRef(vm, e.key, e.value, unused ? 'unused' : e.pendingDelete ? 'pending-delete' : 'config'));
    if (refersTo(e.pending, d) && e.pending !== undefined && e.pending !== e.value)
      out.push(classifyRef(vm, e.key, e.pending, unused ? 'unused' : 'pending'));
  }
  return out;
}

/** Every reference to the disk in the view: every bus, unusedN, pending, snapshot sections. */
export function referencesOf(view: HostView, d: Pick<DiskFacts, 'storage' | 'disk'>): Reference[] {
  const out: Reference[] = [];
  for (const { vm, entries } of view.entries) out.push(...entryRefs(asRef(vm), entries, d));
  for (const [vmid, sections] of view.snapshots ?? []) {
    const vm = view.vms.find((v) => v.vmid === vmid);
    if (!vm) continue;
    for (const s of sections)
      for (const [key, raw] of Object.entries(s.values))
        if (VOLUME_KEY_RE.test(key) && refersTo(raw, d))
          out.push({ ...classifyRef(asRef(vm), key, raw, 'snapshot'), snapshot: s.name });
  }
  return out;
}

export function describeRef(r: Reference): string {
  const at = `${r.key} of ${vmText(r.vm)}`;
  switch (r.where) {
    case 'config':
      return `attached as ${at}`;
    case 'pending':
      return `being attached as ${at} (a pending change)`;
    case 'pending-delete':
      return `being detached as ${at} (a pending delete)`;
    case 'unused':
      return `${at} (an unused disk of that VM)`;
    case 'snapshot':
      return `${r.key} in snapshot "${r.snapshot ?? ''}" of ${vmText(r.vm)}`;
  }
}

const referenced = (d: DiskFacts, action: string, r: Reference, fix: string) =>
  new OwnershipRefusal('referenced', `refusing to ${action} ${volid(d)}: it is ${describeRef(r)}; ${fix}`);

/** A helper attachment left by an interrupted offline expansion: removable, never a reason to keep a disk. */
const isHelperLeftover = (r: Reference) => r.helper && r.where === 'config';

const holders = (refs: readonly Reference[]): VmRef[] => [...new Map(refs.map((r) => [r.vm.vmid, r.vm])).values()];

// ---- decisions ----

export type Verdict<T> = { allowed: true; value: T } | { allowed: false; refusal: OwnershipRefusal };
const allow = <T>(value: T): Verdict<T> => ({ allowed: true, value });
const refuse = <T>(refusal: OwnershipRefusal): Verdict<T> => ({ allowed: false, refusal });

/** The verdict's value, or its refusal thrown. */
export function must<T>(v: Verdict<T>): T {
  if (!v.allowed) throw v.refusal;
  return v.value;
}

/** The volids among `volids` that are markers of this disk on its storage. */
const ownMarkers = (d: DiskFacts, volids: readonly string[]) =>
  volids.filter((m) => m.startsWith(`${d.storage}:`) && parseMarker(m.slice(d.storage.length + 1), d.disk));

export interface FreeLeave {
  disk: OwnershipPermit<'free'>;
  markers: Array<OwnershipPermit<'free'>>;
  /** VMs holding only helper leftovers of the disk: unlinked (permitUnlink) before the free. */
  helperHolders: VmRef[];
}

/**
 * Free: only a disk of the driver's scheme that no VM config key references in a fresh read
 * (helper leftovers aside, which go first), and its own VolumeAttributesClass markers.
 */
export function decideFree(
  d: DiskFacts,
  node: string,
  view: FreshView,
  markers: readonly string[],
): Verdict<FreeLeave> {
  if (classify(d.disk, d.controllerVmId) !== 'driver') return refuse(notDriverDisk(d, 'free', view.vms));
  const refs = referencesOf(view, d);
  const blocking = refs.find((r) => !isHelperLeftover(r));
  if (blocking)
    return refuse(
      referenced(d, 'free', blocking, blocking.driverSite ? 'unpublish it first' : 'remove that reference first'),
    );
  return allow({
    disk: mint('free', { node, storage: d.storage, volid: volid(d) }),
    markers: ownMarkers(d, markers).map((m) => mint('free', { node, storage: d.storage, volid: m })),
    helperHolders: holders(refs),
  });
}

export type GrowPlan =
  | { mode: 'online'; vm: VmRef; helperHolders: VmRef[] }
  | { mode: 'offline'; helperHolders: VmRef[] }
  | { mode: 'settling'; ref: Reference };

/**
 * Grow: only a disk of the driver's scheme. Online through the one VM the driver attached it to
 * (a driver drive line in its current config); offline (through a helper VM) only when no VM
 * references it at all. Any other reference — another bus, unusedN, a drive line the driver did
 * not write, a second VM — refuses; a pending attach or detach is `settling` (ABORTED, retry).
 */
export function decideGrow(d: DiskFacts, view: FreshView): Verdict<GrowPlan> {
  if (!isOurDisk(d, view)) return refuse(notDriverDisk(d, 'grow', view.vms));
  const refs = referencesOf(view, d);
  const foreign = refs.find((r) => !r.driverSite);
  if (foreign) return refuse(referenced(d, 'grow', foreign, 'the driver grows only disks it attached'));
  const helperHolders = holders(refs.filter(isHelperLeftover));
  const live = refs.filter((r) => !r.helper && r.where !== 'snapshot');
  const moving = live.find((r) => r.where !== 'config');
  if (moving) return allow({ mode: 'settling', ref: moving });
  const on = holders(live);
  const [vm, second] = on;
  if (second && vm)
    return refuse(
      new OwnershipRefusal(
        'referenced',
        `refusing to grow ${volid(d)}: it is attached to ${vmText(vm)} and to ${vmText(second)}; a single-node volume is on one VM`,
      ),
    );
  return allow(vm ? { mode: 'online', vm, helperHolders } : { mode: 'offline', helperHolders });
}

export interface ModifyLeave {
  marker: OwnershipPermit<'alloc'>;
  /** The disk's older markers, freed once the new one exists. */
  older: Array<OwnershipPermit<'free'>>;
  /** VMs whose driver drive lines of the disk are re-lined (through their queues: permitConfigChange). */
  vms: VmRef[];
}

/**
 * Modify (VolumeAttributesClass): only a disk of the driver's scheme, referenced only by drive
 * lines the driver wrote. The marker's allocation is permitted only once that holds.
 */
export function decideModify(
  d: DiskFacts,
  node: string,
  view: HostView,
  markerFile: string,
  older: readonly string[],
): Verdict<ModifyLeave> {
  if (!isOurDisk(d, view)) return refuse(notDriverDisk(d, 'change', view.vms));
  const refs = referencesOf(view, d);
  const foreign = refs.find((r) => !r.driverSite && r.where !== 'snapshot');
  if (foreign) return refuse(referenced(d, 'change', foreign, 'the driver changes only drive lines it wrote'));
  if (parseMarker(markerFile)?.disk !== d.disk)
    throw new Error(`ownership: ${markerFile} is not a marker name of ${d.disk}`);
  return allow({
    marker: mint('alloc', {
      node,
      storage: d.storage,
      // A marker is named after its disk, so it has the disk's owner (Proxmox requires vm-<vmid>-…).
      req: {
        vmid: diskOwner(d.disk) ?? d.controllerVmId,
        filename: markerFile,
        sizeBytes: MARKER_BYTES,
        format: 'raw',
      },
    }),
    older: ownMarkers(d, older).map((m) => mint('free', { node, storage: d.storage, volid: m })),
    vms: holders(refs.filter((r) => !r.helper && r.where !== 'snapshot')),
  });
}

/** Create: a new disk of the driver's scheme, owned by the controller VMID. */
export function permitCreate(
  d: DiskFacts,
  node: string,
  sizeBytes: number,
  pvName: string,
): Verdict<OwnershipPermit<'alloc'>> {
  if (classify(d.disk, d.controllerVmId) !== 'driver')
    return refuse(
      new OwnershipRefusal(
        'not-driver-disk',
        `volume name "${pvName}" would make ${d.disk}, which is Proxmox's own naming of VM ${d.controllerVmId}'s disks; use a PV name such as pvc-<uid>`,
      ),
    );
  return allow(
    mint('alloc', {
      node,
      storage: d.storage,
      req: { vmid: d.controllerVmId, filename: allocFilename(d.disk), sizeBytes, format: formatOfVolname(d.disk) },
    }),
  );
}

/**
 * Attach, the disk's side: never to the VM that owns it, never an orphan (its VMID can come back
 * as a new VM, which would then own it and free it with itself). A static PV naming a disk of
 * another existing VM is attached like upstream did, as long as no VM config references it
 * (attachConflict, over the other VMs; the target VM's own keys: foreignRefsOn).
 */
export function decideAttach(d: DiskFacts, vms: readonly VmResource[], target: VmRef): Verdict<true> {
  const owner = diskOwner(d.disk);
  if (classify(d.disk, d.controllerVmId) === 'marker') return refuse(notDriverDisk(d, 'attach', vms));
  if (owner === target.vmid)
    return refuse(
      new OwnershipRefusal(
        'own-vm',
        `refusing to attach ${volid(d)} to ${vmText(target)}: it is that VM's own disk, which the driver never publishes`,
      ),
    );
  // The controller VMID has no VM, so its disks are no orphans, except under the names Proxmox
  // gives a VM's own disks (`vm-<controller>-disk-N`…): a VM of that VMID made later owns those.
  const orphanable = owner !== d.controllerVmId || classify(d.disk, d.controllerVmId) === 'proxmox';
  if (orphanable && !vms.some((v) => v.vmid === owner)) return refuse(notDriverDisk(d, 'attach', vms));
  return allow(true);
}

/** The target VM's own references to the disk that the driver did not write (boot disk, by hand, unusedN of its own). */
export function foreignRefsOn(
  vm: VmRef,
  entries: readonly ConfigEntry[],
  d: Pick<DiskFacts, 'storage' | 'disk'>,
): Reference[] {
  const owner = diskOwner(d.disk);
  // An unusedN of a disk the VM does not own is a dangling reference (deleting it frees nothing).
  return entryRefs(vm, entries, d).filter((r) => !r.driverSite && !(r.where === 'unused' && owner !== vm.vmid));
}

/** Why another VM's reference forbids attaching the disk: any key but helper leftovers (those are removable). */
export function attachConflict(
  scan: readonly VmEntries[],
  d: Pick<DiskFacts, 'storage' | 'disk'>,
): Reference | undefined {
  const refs = referencesOf({ vms: scan.map((s) => s.vm), entries: scan }, d);
  return refs.find((r) => !r.driverSite) ?? refs.find((r) => !isHelperLeftover(r));
}

// ---- the write path of one VM ----

/** Every value a key holds on the VM now: current and pending (both go with a change of the key). */
const held = (entries: readonly ConfigEntry[], key: string): string[] => {
  const e = entries.find((x) => x.key === key);
  return [e?.value, e?.pending].filter((v): v is string => v !== undefined);
};

function keyRefusal(vm: VmRef, key: string, why: string): Verdict<never> {
  return refuse(new OwnershipRefusal('foreign-key', `refusing to change ${key} of ${vmText(vm)}: ${why}`));
}

/** Why the key is not the driver's to change: a slot it does not use, or a value it did not write. */
function driverKey(vm: VmRef, key: string, values: readonly string[]): string | undefined {
  const slot = slotOf(key);
  if (slot === undefined || slot < MIN_SLOT || slot > MAX_SLOT)
    return 'not a SCSI slot the driver uses (scsi1..scsi30)';
  const foreign = values.find((raw) => !classifyRef(vm, key, raw, 'config').driverSite);
  return foreign === undefined
    ? undefined
    : `it holds ${foreign.split(',')[0] ?? foreign}, a drive line the driver did not write`;
}

/**
 * Keys with a pending change that the change at hand does not touch (`touched`: the keys it sets
 * or deletes). Any config change or unlink of a stopped VM makes Proxmox apply the whole pending
 * section with it (qemu-server update_vm_api: vmconfig_apply_pending), so on such a VM the
 * driver's change would also apply these, whoever queued them: a drive line that merely looks
 * like the driver's (its slot and WWN scheme) may name any disk. On a running VM it hot-plugs the
 * pending section again (vmconfig_hotplug_pending), which leaves what cannot be hot-plugged
 * pending, as every edit in the web UI does.
 */
export function foreignPendingKeys(entries: readonly ConfigEntry[], touched: readonly string[]): string[] {
  return entries
    .filter((e) => (e.pending !== undefined || e.pendingDelete) && !touched.includes(e.key))
    .map((e) => e.key);
}

/** The keys a config change sets or deletes. */
export const changedKeys = (change: ConfigChange): string[] => [
  ...Object.keys(change.set ?? {}),
  ...(change.delete ?? []),
];

/** The VM's state as read now, when it has foreign pending changes (the caller reads it then). */
export interface VmRunState {
  running: boolean;
}

function pendingRefusal(
  vm: VmRef,
  entries: readonly ConfigEntry[],
  touched: readonly string[],
  state: VmRunState | undefined,
): Verdict<never> | undefined {
  const keys = foreignPendingKeys(entries, touched);
  if (keys.length === 0 || state?.running) return undefined;
  return refuse(
    new OwnershipRefusal(
      'foreign-key',
      `refusing to change the config of ${vmText(vm)}: it is ${state ? 'stopped' : 'in an unknown state'} and has pending changes this change does not make (${keys.join(', ')}); Proxmox applies every pending change of a stopped VM together with any config change, so the driver's would apply them too. Start the VM (which applies them) or revert them, then retry`,
    ),
  );
}

/**
 * A config change of one VM, planned on `entries`: it may set only scsi1..30 keys that are
 * free or hold the driver's drive line of the same disk, to a disk the VM does not own, and
 * delete only such lines or dangling unusedN entries (of disks the VM does not own). On a VM
 * with pending changes of others, `state` (read now) must say it runs (foreignPendingKeys).
 */
export function permitConfigChange(
  vm: VmRef,
  entries: readonly ConfigEntry[],
  change: ConfigChange,
  state?: VmRunState,
): Verdict<OwnershipPermit<'config'>> {
  const pending = pendingRefusal(vm, entries, changedKeys(change), state);
  if (pending) return pending;
  for (const [key, value] of Object.entries(change.set ?? {})) {
    const now = held(entries, key);
    const why = driverKey(vm, key, now);
    if (why) return keyRefusal(vm, key, why);
    const next = parseDrive(value);
    if (!next) return keyRefusal(vm, key, `"${value}" is not a drive line`);
    if (diskOwner(next.disk) === vm.vmid) return keyRefusal(vm, key, `${next.disk} is that VM's own disk`);
    const other = now.map(parseDrive).find((x) => x && (x.storage !== next.storage || x.disk !== next.disk));
    if (other) return keyRefusal(vm, key, `it holds another disk (${other.storage}:${other.disk})`);
  }
  for (const key of change.delete ?? []) {
    const why = deletable(vm, entries, key);
    if (why) return keyRefusal(vm, key, why);
  }
  return allow(mint('config', { node: vm.node, vmid: vm.vmid, change }));
}

function deletable(vm: VmRef, entries: readonly ConfigEntry[], key: string): string | undefined {
  const now = held(entries, key);
  // A delete or unlink removes the key's current and pending values together: when they name
  // two disks, one of them is a change the driver never makes (it only sets free slots).
  const disks = new Set(now.map((raw) => parseDrive(raw)?.disk ?? raw));
  if (disks.size > 1)
    return `its current and pending values name different disks (${[...disks].join(', ')}); removing it would drop both`;
  if (/^unused\d+$/.test(key)) {
    const own = now.map(parseDrive).some((d) => d && diskOwner(d.disk) === vm.vmid);
    return own ? 'deleting an unused disk of its own frees it' : undefined;
  }
  return driverKey(vm, key, now);
}

/** Unlinking keys of one VM, planned on `entries`: only the driver's drive lines and dangling unusedN. */
export function permitUnlink(
  vm: VmRef,
  entries: readonly ConfigEntry[],
  keys: readonly string[],
  digest: string | undefined,
  state?: VmRunState,
): Verdict<OwnershipPermit<'unlink'>> {
  // PUT …/unlink is update_vm_api with `delete`: it applies the pending section like a change.
  const pending = pendingRefusal(vm, entries, keys, state);
  if (pending) return pending;
  for (const key of keys) {
    const why = deletable(vm, entries, key);
    if (why) return keyRefusal(vm, key, why);
  }
  return allow(mint('unlink', { node: vm.node, vmid: vm.vmid, keys: [...keys], digest }));
}

/**
 * Resizing `key` of one VM to `size`, planned on `entries`: the key must be the driver's
 * current drive line of a disk of the driver's scheme, or of a restored volume whose volume VM
 * is ours in `owners` (the read decideGrow decided on).
 */
export function permitResize(
  d: DiskFacts,
  vm: VmRef,
  entries: readonly ConfigEntry[],
  key: string,
  size: string,
  digest: string | undefined,
  owners?: Pick<HostView, 'entries'>,
): Verdict<OwnershipPermit<'resize'>> {
  if (!isOurDisk(d, owners)) return refuse(notDriverDisk(d, 'grow', undefined));
  const e = entries.find((x) => x.key === key);
  const r = e?.value !== undefined && refersTo(e.value, d) ? classifyRef(vm, key, e.value, 'config') : undefined;
  if (!r?.driverSite) return keyRefusal(vm, key, `it is not the driver's drive line of ${volid(d)}`);
  return allow(mint('resize', { node: vm.node, vmid: vm.vmid, key, size, digest }));
}

/**
 * A call on a thin copy's helper VM (docs/snapshots.md): allowed only when the rules of
 * copy-vms.ts find the VMs it touches to be ours, stopped, and holding exactly what the step
 * names, in a view read at decision time (the host's VMs fresh, the cluster's VMIDs).
 */
export function decideCopyStep(step: CopyStep, view: CopyView): Verdict<OwnershipPermit<'copy'>> {
  const p = copyStepProblem(step, view);
  if (p) return refuse(new OwnershipRefusal(p.reason, `refusing to ${step.op} helper VM ${step.vmid}: ${p.message}`));
  return allow(mint('copy', step));
}
