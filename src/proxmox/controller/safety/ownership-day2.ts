// The ownership gate's decisions for the day-2 commands (docs/ownership.md, "Day-2 paths"): what
// `report --fix` may free on its own (a leftover: the DeleteVolume rule plus the proof that no
// PersistentVolume names it) and what `move` may do with its helper VM (create it holding the
// disk, let it hold the disk, migrate it, let go of the disk, destroy it). Like ownership.ts,
// every decision is a pure function of the disk's name, a fresh read (fresh-read.ts) and, for
// the helper, its state read at decision time; an allowed one hands out the permit its port
// (ownership-port.ts, mover-port.ts) demands, and a refusal comes before any change.
//
// The helper VM is the only VM move creates, changes or destroys, and it is dangerous by
// construction: it has the controller VMID, so it owns every driver disk, and destroying it
// frees every volume of that VMID its config or snapshot sections name. Hence: it is ours only
// with the config's controller VMID and move's name for it; it holds the one planned disk as
// an unusedN entry and nothing else; it migrates only while no other VM references the disk
// (Proxmox frees the source copy afterwards, which a snapshot of another VM may still name);
// and it is destroyed only when its config, pending section and snapshot sections name no
// volume but the released placeholder.
import type { ConfigEntry } from '../../api/api.js';
import { parseMarker } from '../params/mutable.js';
import { parseVolumeId, volidOf } from '../../volume-id.js';
import {
  type DiskFacts,
  type FreshView,
  type Verdict,
  OwnershipRefusal,
  classify,
  describeRef,
  referencesOf,
} from './ownership.js';
import { type OwnershipPermit, mintPermit } from './permit.js';

/** The name `move` gives its helper VM; a VM with the controller VMID and another name is not ours. */
export const MOVER_VM_NAME = 'pve-nfs-csi-mover';
const PLACEHOLDER_SUFFIX = '-pve-nfs-csi-released';

/** What the helper's unusedN is set to when it lets go of the disk: a name that is no volume. */
export const releasedPlaceholder = (storage: string, vmid: number): string =>
  `${storage}:vm-${vmid}${PLACEHOLDER_SUFFIX}`;
export const isReleasedPlaceholder = (volid: string): boolean => volid.endsWith(PLACEHOLDER_SUFFIX);

/** The helper VM as read at decision time (GET /cluster/resources, then its GET …/pending). */
export interface HelperVm {
  vmid: number;
  node: string;
  name: string;
  status?: string | undefined;
  lock?: string | undefined;
  /** Every volume key of its config and pending section with the volume it names. */
  held: ReadonlyArray<{ key: string; volid: string }>;
}

const ok = <T>(value: T): Verdict<T> => ({ allowed: true, value });
const no = <T>(reason: ConstructorParameters<typeof OwnershipRefusal>[0], message: string): Verdict<T> => ({
  allowed: false,
  refusal: new OwnershipRefusal(reason, message),
});
const volid = (d: Pick<DiskFacts, 'storage' | 'disk'>) => volidOf(d.storage, d.disk);

// ---- leftovers (report --fix, a move's source copy) ----

/**
 * The day-2 proof, supplied by the command from a PersistentVolume list read right before
 * acting: no handle names the disk (or, for a marker, its disk). `zone`: the disk's host for a
 * local storage (a handle of another host names another disk); absent, every handle counts.
 */
export interface Unclaimed {
  region: string;
  pvHandles: ReadonlyArray<{ pv: string; handle: string }>;
  zone?: string | undefined;
}

export function provenUnclaimed(d: Pick<DiskFacts, 'storage' | 'disk'>, proof: Unclaimed): Verdict<true> {
  // A disk and its markers go together: a PV naming either keeps both.
  const baseOf = (disk: string) => parseMarker(disk)?.disk ?? disk;
  const base = baseOf(d.disk);
  for (const { pv, handle } of proof.pvHandles) {
    const ref = parseVolumeId(handle);
    if (!ref || ref.region !== proof.region || ref.storage !== d.storage || baseOf(ref.disk) !== base) continue;
    if (proof.zone !== undefined && ref.zone !== '' && ref.zone !== proof.zone) continue;
    return no('claimed', `refusing to free ${volid(d)}: PersistentVolume ${pv} names it (${handle})`);
  }
  return ok(true);
}

/**
 * Free a leftover: a disk of the driver's scheme, or a VolumeAttributesClass marker of one,
 * that no VM config key references in a fresh read (every bus, unusedN, pending, snapshot
 * sections; a helper attachment too: it is unlinked first, by its own path) and no PV names.
 */
export function decideFreeLeftover(
  d: DiskFacts,
  node: string,
  view: FreshView,
  proof: Unclaimed,
): Verdict<OwnershipPermit<'free-leftover'>> {
  const cls = classify(d.disk, d.controllerVmId);
  const base = cls === 'marker' ? parseMarker(d.disk)?.disk : d.disk;
  if (cls === 'foreign' || cls === 'proxmox' || !base || classify(base, d.controllerVmId) !== 'driver')
    return no(
      'not-driver-disk',
      `refusing to free ${volid(d)}: not a disk of this driver (vm-${d.controllerVmId}-<pv name>) or a marker of one`,
    );
  const ref = referencesOf(view, d)[0];
  if (ref) return no('referenced', `refusing to free ${volid(d)}: it is ${describeRef(ref)}; it is no leftover`);
  const unclaimed = provenUnclaimed(d, proof);
  if (!unclaimed.allowed) return unclaimed;
  return ok(mintPermit('free-leftover', { node, storage: d.storage, volid: volid(d) }));
}

// ---- the move's helper VM ----

/** Why `vm` is not the helper the config allows, if it is not. */
function notOurs(vm: HelperVm, controllerVmId: number): Verdict<never> | undefined {
  if (vm.vmid !== controllerVmId)
    return no(
      'not-our-helper',
      `refusing to use VM ${vm.vmid}: move's helper VM has the controller VMID ${controllerVmId} (it must own the disk)`,
    );
  if (vm.name !== MOVER_VM_NAME)
    return no(
      'not-our-helper',
      `VMID ${vm.vmid} (the controller VMID that owns the driver's disks) is a VM named "${vm.name}" on ${vm.node}; ` +
        `move uses that VMID for its helper VM "${MOVER_VM_NAME}" and will not touch another VM`,
    );
  return undefined;
}

const unlocked = (vm: HelperVm): Verdict<never> | undefined =>
  vm.lock
    ? no(
        'helper-state',
        `helper VM ${vm.vmid} on ${vm.node} is locked (${vm.lock}); wait for its task, then run move again`,
      )
    : undefined;

/** The disk may go into the helper: a driver disk that no VM references (fresh read of its host). */
function movable(d: DiskFacts, view: FreshView, helperVmid?: number): Verdict<never> | undefined {
  if (classify(d.disk, d.controllerVmId) !== 'driver')
    return no('not-driver-disk', `refusing to move ${volid(d)}: move carries only disks of this driver`);
  const ref = referencesOf(view, d).find((r) => r.vm.vmid !== helperVmid);
  return ref ? no('referenced', `refusing to move ${volid(d)}: it is ${describeRef(ref)}; detach it first`) : undefined;
}

/** A new move's check (its dry run too): the disk may go into the helper. */
export function decideMovable(d: DiskFacts, view: FreshView): Verdict<true> {
  return movable(d, view) ?? ok(true);
}

/** Create the helper on `node` holding the disk as unused0: no VM has the VMID, nothing references the disk. */
export function decideMoverCreate(
  d: DiskFacts,
  node: string,
  view: FreshView,
  existing: HelperVm | undefined,
  description: string,
): Verdict<OwnershipPermit<'mover-create'>> {
  if (existing)
    return no(
      'helper-state',
      `refusing to create helper VM ${existing.vmid}: a VM with that VMID is on ${existing.node}`,
    );
  const why = movable(d, view);
  if (why) return why;
  return ok(
    mintPermit('mover-create', {
      node,
      vmid: d.controllerVmId,
      options: { name: MOVER_VM_NAME, description, unused0: volid(d) },
    }),
  );
}

/** An existing empty helper on the disk's host takes it as unused0. */
export function decideMoverHold(
  d: DiskFacts,
  node: string,
  view: FreshView,
  helper: HelperVm,
): Verdict<OwnershipPermit<'mover-hold'>> {
  const why = notOurs(helper, d.controllerVmId) ?? unlocked(helper);
  if (why) return why;
  if (helper.node !== node || helper.held.length > 0)
    return no(
      'helper-state',
      `helper VM ${helper.vmid} is on ${helper.node} holding ${helper.held.map((h) => h.volid).join(', ') || 'nothing'}: another move is in progress; finish it first`,
    );
  const moving = movable(d, view, helper.vmid);
  if (moving) return moving;
  return ok(mintPermit('mover-hold', { node, vmid: helper.vmid, change: { set: { unused0: volid(d) } } }));
}

/**
 * Migrate the helper offline to `target`: it holds exactly the planned disk as unusedN, has no
 * snapshot sections (their volumes would travel too), is stopped and unlocked, and no other VM
 * of the host references the disk in a fresh read (Proxmox frees the source copy afterwards).
 */
export function decideMoverMigrate(
  d: DiskFacts,
  target: string,
  view: FreshView,
  helper: HelperVm,
): Verdict<OwnershipPermit<'mover-migrate'>> {
  const why = notOurs(helper, d.controllerVmId) ?? unlocked(helper);
  if (why) return why;
  const [only, extra] = helper.held;
  if (!only || extra || only.volid !== volid(d) || !/^unused\d+$/.test(only.key))
    return no(
      'helper-state',
      `refusing to migrate helper VM ${helper.vmid}: it must hold exactly ${volid(d)} as an unused disk, and holds ${helper.held.map((h) => `${h.key}=${h.volid}`).join(', ') || 'nothing'}`,
    );
  if (helper.status === 'running')
    return no('helper-state', `refusing to migrate helper VM ${helper.vmid}: it is running; move migrates offline`);
  if ((view.snapshots.get(helper.vmid) ?? []).length > 0)
    return no(
      'helper-state',
      `refusing to migrate helper VM ${helper.vmid}: it has snapshots, whose volumes would move too`,
    );
  if (target === helper.node)
    return no('helper-state', `refusing to migrate helper VM ${helper.vmid}: it is already on ${target}`);
  const moving = movable(d, view, helper.vmid);
  if (moving) return moving;
  return ok(mintPermit('mover-migrate', { node: helper.node, vmid: helper.vmid, target }));
}

/** The helper lets go of `target` (the disk where it is now) by overwriting its unusedN with a name that is no volume. */
export function decideMoverRelease(
  helper: HelperVm,
  target: string,
  controllerVmId: number,
): Verdict<OwnershipPermit<'mover-release'>> {
  const why = notOurs(helper, controllerVmId) ?? unlocked(helper);
  if (why) return why;
  const entry = helper.held.find((h) => h.volid === target);
  const storage = target.split(':')[0] ?? '';
  if (!entry || !/^unused\d+$/.test(entry.key))
    return no(
      'helper-state',
      `refusing to release ${target}: helper VM ${helper.vmid} does not hold it as an unused disk`,
    );
  return ok(
    mintPermit('mover-release', {
      node: helper.node,
      vmid: helper.vmid,
      change: { set: { [entry.key]: releasedPlaceholder(storage, helper.vmid) } },
    }),
  );
}

/** Every volume a VM's entries name (current and pending). */
const volumesOf = (entries: readonly ConfigEntry[]): string[] =>
  entries.flatMap((e) =>
    /^(?:ide|sata|scsi|virtio|efidisk|tpmstate|unused)\d+$|^vmstate$/.test(e.key)
      ? [e.value, e.pending].flatMap((v) => (v ? [v.split(',')[0] ?? v] : []))
      : [],
  );

/**
 * Destroy the helper: ours, stopped, unlocked, and neither its config, its pending section nor
 * a snapshot section names a volume but the released placeholder (qemu-server frees every
 * volume of the VMID a destroyed VM names: with the controller VMID, those are driver disks).
 */
export function decideMoverDestroy(
  helper: HelperVm,
  view: FreshView,
  controllerVmId: number,
): Verdict<OwnershipPermit<'mover-destroy'>> {
  const why = notOurs(helper, controllerVmId) ?? unlocked(helper);
  if (why) return why;
  if (helper.status === 'running')
    return no('helper-state', `refusing to destroy helper VM ${helper.vmid}: it is running`);
  const entries = view.entries.find((e) => e.vm.vmid === helper.vmid)?.entries;
  if (!entries) return no('helper-state', `refusing to destroy helper VM ${helper.vmid}: its config was not read`);
  const sections = view.snapshots.get(helper.vmid) ?? [];
  const named = [
    ...volumesOf(entries),
    ...helper.held.map((h) => h.volid),
    ...sections.flatMap((s) => volumesOf(Object.entries(s.values).map(([key, value]) => ({ key, value })))),
  ].filter((v) => v.includes(':') && !isReleasedPlaceholder(v));
  if (named.length > 0 || sections.length > 0)
    return no(
      'helper-state',
      `helper VM ${helper.vmid} on ${helper.node} still references ${[...new Set(named)].join(', ') || `snapshot ${sections[0]?.name ?? ''}`}; not destroying it`,
    );
  return ok(mintPermit('mover-destroy', { node: helper.node, vmid: helper.vmid }));
}
