// The helper VMs of thin copies (docs/snapshots.md, "Proxmox: design") and the rules the
// ownership gate applies before each call on them (ownership.ts decideCopyStep). A helper VM is
// the driver's only when its name is one of ours and its description is our record naming it;
// each rule reads a fresh view of the host (fresh-read.ts) and the VMIDs of the whole cluster.
// Nothing here makes a permit: the gate does, once a rule found no problem.
import { createHash } from 'node:crypto';
import type { ConfigEntry, VmResource } from '../../api/api.js';
import { volidOfValue } from '../../mover-vm.js';
import { diskOwner, parseVolid } from '../../volume-id.js';
import type { VmEntries } from '../state/scan.js';
import type { FreshView, RefusalReason } from './ownership.js';

/**
 * What a helper VM is for: `copy` holds the source for a moment and is snapshotted; `snapshot`
 * keeps a CSI snapshot (its clone as scsi0); `volume` owns a restored or cloned volume without
 * referencing it (the VMID in the disk's name must stay an existing VM of ours).
 */
export type CopyRole = 'copy' | 'snapshot' | 'volume';

export const COPY_VM_NAMES: Readonly<Record<CopyRole, string>> = {
  copy: 'pve-nfs-csi-copy',
  snapshot: 'pve-nfs-csi-snapshot',
  volume: 'pve-nfs-csi-volume',
};

/** What a helper VM's description records (one line of JSON after a fixed prefix). */
export interface CopyRecord {
  role: CopyRole;
  /** The controller VMID of the driver that made it (its disks are vm-<this>-…). */
  controller: number;
  /** The CSI snapshot name, or the new volume's name for a restore or clone. */
  name: string;
  /** The source volume handle. */
  source: string;
  /** Creation time, epoch seconds. */
  created: number;
}

const PREFIX = 'pve-nfs-csi thin copy ';

/** What a volume VM's released `unusedN` is named after: `vm-<R>-pve-nfs-csi-released-<disk tail>`. */
export const RELEASED = 'pve-nfs-csi-released';

/** The snapshot (pve-snapshot-name) a copy VM takes for `name`: `csi` + 24 hex digits of its hash. */
export const snapnameFor = (name: string) => `csi${createHash('sha256').update(name).digest('hex').slice(0, 24)}`;

/**
 * The volume a volume VM issued (docs/ownership.md, "Ids"): the disk its released placeholder
 * names, on the placeholder's storage. Undefined while it still holds its clone or has no record.
 */
export function releasedVolume(f: Pick<HelperFacts, 'vm' | 'entries'>): { storage: string; disk: string } | undefined {
  for (const e of f.entries) {
    if (!e.key.startsWith('unused') || !e.value) continue;
    const ref = parseVolid(e.value);
    const head = `vm-${String(f.vm.vmid)}-${RELEASED}-`;
    if (!ref?.disk.startsWith(head)) continue;
    const disk = `vm-${String(f.vm.vmid)}-${ref.disk.slice(head.length)}`;
    if (/^vm-\d+-disk-\d+$/.test(disk)) return { storage: ref.storage, disk };
  }
  return undefined;
}

export function formatRecord(r: CopyRecord): string {
  return PREFIX + JSON.stringify(r);
}

export function parseRecord(description: string | undefined): CopyRecord | undefined {
  if (!description?.startsWith(PREFIX)) return undefined;
  try {
    const r = JSON.parse(description.slice(PREFIX.length)) as Partial<CopyRecord>;
    if (
      (r.role === 'copy' || r.role === 'snapshot' || r.role === 'volume') &&
      typeof r.controller === 'number' &&
      typeof r.name === 'string' &&
      typeof r.source === 'string' &&
      typeof r.created === 'number'
    )
      return r as CopyRecord;
  } catch {
    // not ours
  }
  return undefined;
}

/** One call on a helper VM, exactly as the port sends it. */
export type CopyStep =
  | { op: 'create'; node: string; vmid: number; record: CopyRecord }
  | { op: 'hold'; node: string; vmid: number; volid: string; digest: string }
  | { op: 'snapshot'; node: string; vmid: number; snapname: string; volid: string }
  | { op: 'unsnapshot'; node: string; vmid: number; snapname: string }
  | { op: 'clone'; node: string; vmid: number; snapname: string; newid: number; record: CopyRecord }
  /** A restore or clone larger than its source: the volume VM grows its clone (scsi0) before letting go. */
  | { op: 'grow'; node: string; vmid: number; size: string; digest: string }
  /** A volume VM lets go of its clone: scsi0 unlinked (Proxmox keeps it as unusedN of its owner)… */
  | { op: 'detach'; node: string; vmid: number; digest: string }
  /** …then that unusedN overwritten with a name that is no volume: no reference, nothing freed. */
  | { op: 'release'; node: string; vmid: number; key: string; placeholder: string; digest: string }
  /**
   * A restore or clone into another zone: the volume VM, still holding its clone (grown) as
   * scsi0, migrates offline to `target`, where Proxmox copies the clone in full and frees it here.
   */
  | { op: 'migrate'; node: string; vmid: number; volid: string; target: string }
  /** DeleteVolume of a restored volume: the disk its volume VM owns, unreferenced. */
  | { op: 'free'; node: string; vmid: number; storage: string; volid: string }
  | { op: 'destroy'; node: string; vmid: number };

export interface CopyView {
  host: FreshView;
  /** Every VMID of the cluster, read now. */
  vmids: ReadonlySet<number>;
  controllerVmId: number;
  /** For a migration only: the target host, read now (its storages, and the volumes on them). */
  target?: MigrationTarget;
}

export interface MigrationTarget {
  node: string;
  /** The storages the target host has available. */
  storages: readonly string[];
  /** Every volume id on those storages of the target host (owner filter: the helper VMID). */
  volids: readonly string[];
}

export interface StepProblem {
  reason: RefusalReason;
  message: string;
}

export interface HelperFacts {
  vm: VmResource;
  entries: readonly ConfigEntry[];
  record: CopyRecord | undefined;
  /** Drive keys (not unusedN) with their volume ids, current and pending. */
  drives: Array<{ key: string; volid: string }>;
  /** Volumes the VM's config names that the VM owns (destroy would free them). */
  owned: string[];
}

export function helperFacts(view: FreshView, vmid: number): HelperFacts | undefined {
  const at = view.entries.find((e) => e.vm.vmid === vmid);
  if (!at) return undefined;
  const drives: HelperFacts['drives'] = [];
  const owned = new Set<string>();
  for (const e of at.entries) {
    for (const value of [e.value, e.pending]) {
      if (value === undefined) continue;
      const volid = volidOfValue(e.key, value);
      if (!volid) continue;
      if (!e.key.startsWith('unused')) drives.push({ key: e.key, volid });
      const disk = parseVolid(volid)?.disk;
      if (disk && diskOwner(disk) === vmid) owned.add(volid);
    }
  }
  const description = at.entries.find((e) => e.key === 'description')?.value;
  return { vm: at.vm, entries: at.entries, record: parseRecord(description), drives, owned: [...owned] };
}

/**
 * The volume VM of ours that owns `disk`, if it is one: a restored or cloned volume
 * (`vm-<volume VM>-disk-N`, the name Proxmox gave the clone) whose owner VM, in `entries` (a read
 * taken now), carries our volume VM's name and a record of this controller, and whose released
 * placeholder names exactly that disk. Such a disk is the
 * driver's own like `vm-<controller>-<pv name>`: the gate frees, grows and re-lines it. Nothing
 * else is: a snapshot VM's clone, a copy VM, another controller's volume VM, a disk named otherwise.
 */
export function ourVolumeVm(
  entries: readonly VmEntries[],
  disk: string,
  controllerVmId: number,
): VmResource | undefined {
  const owner = diskOwner(disk);
  if (owner === undefined || owner === controllerVmId || !/^vm-\d+-disk-\d+$/.test(disk)) return undefined;
  const at = entries.find((e) => e.vm.vmid === owner);
  const record = parseRecord(at?.entries.find((e) => e.key === 'description')?.value);
  // Only the disk it issued (its released placeholder names it): not another vm-<R>-disk-N.
  return at &&
    at.vm.name === COPY_VM_NAMES.volume &&
    record?.role === 'volume' &&
    record.controller === controllerVmId &&
    releasedVolume(at)?.disk === disk
    ? at.vm
    : undefined;
}

const problem = (reason: RefusalReason, message: string): StepProblem => ({ reason, message });

/** The helper VM is ours in that role (name, record, controller), stopped and unlocked. */
function ours(v: CopyView, vmid: number, roles: readonly CopyRole[]): HelperFacts | StepProblem {
  const f = helperFacts(v.host, vmid);
  if (!f) return problem('orphan-owner', `VM ${vmid} is not on the host any more`);
  const r = f.record;
  const named = r && roles.includes(r.role) && f.vm.name === COPY_VM_NAMES[r.role];
  if (!named || r.controller !== v.controllerVmId)
    return problem('foreign-key', `VM ${f.vm.name} (${vmid}) is not a ${roles.join('/')} VM of this driver`);
  if (f.vm.status === 'running') return problem('foreign-key', `helper VM ${vmid} is running; it must never run`);
  const lock = f.entries.find((e) => e.key === 'lock')?.value;
  if (lock) return problem('referenced', `helper VM ${vmid} is locked (${lock})`);
  return f;
}

const isProblem = (x: HelperFacts | StepProblem): x is StepProblem => 'reason' in x;

/** A disk of the driver's own scheme (`vm-<controller>-<pv name>`, not a Proxmox name, not a marker). */
function isDriverDisk(volid: string, controllerVmId: number): boolean {
  const disk = parseVolid(volid)?.disk ?? '';
  const tail = disk.slice(`vm-${String(controllerVmId)}-`.length);
  return diskOwner(disk) === controllerVmId && !/^(?:disk-\d+|cloudinit|state-.*)$/.test(tail) && !tail.includes('+');
}

/**
 * The disk a copy may start from: a driver disk, the disk of one of our snapshot VMs, or the
 * volume one of our volume VMs issued (a restored or cloned volume is a volume like any other).
 */
export function copySourceProblem(v: CopyView, volid: string, driverDisk: boolean): StepProblem | undefined {
  if (driverDisk) return undefined;
  const disk = parseVolid(volid)?.disk ?? '';
  const owner = diskOwner(disk);
  const none = problem('not-driver-disk', `${volid} is neither a disk of this driver nor one of its snapshots`);
  if (owner === undefined || !/^vm-\d+-disk-\d+$/.test(disk)) return none;
  if (ourVolumeVm(v.host.entries, disk, v.controllerVmId)) {
    const f = helperFacts(v.host, owner);
    const issued = f && releasedVolume(f);
    return issued && `${issued.storage}:${issued.disk}` === volid ? undefined : none;
  }
  const holder = ours(v, owner, ['snapshot']);
  return isProblem(holder) ? none : undefined;
}

/**
 * A copy VM's snapshot may go only when it is the one the copy VM takes for the name its record
 * gives (snapnameFor) and it covers nothing but a disk a copy may start from: a look-alike record
 * never makes the driver delete someone's snapshot of a disk it does not own.
 */
function unsnapshotProblem(v: CopyView, f: HelperFacts, snapname: string): StepProblem | undefined {
  if (snapname !== snapnameFor(f.record?.name ?? ''))
    return problem('foreign-key', `snapshot ${snapname} of copy VM ${String(f.vm.vmid)} is not one the driver took`);
  const section = v.host.snapshots.get(f.vm.vmid)?.find((s) => s.name === snapname);
  for (const [k, val] of Object.entries(section?.values ?? {})) {
    const volid = volidOfValue(k, val);
    if (!volid || k === 'vmstate') continue;
    const bad = k !== 'scsi0' ? problem('foreign-key', `snapshot ${snapname} holds ${k}`) : undefined;
    const p = bad ?? copySourceProblem(v, volid, isDriverDisk(volid, v.controllerVmId));
    if (p) return { reason: p.reason, message: `snapshot ${snapname} of copy VM ${String(f.vm.vmid)}: ${p.message}` };
  }
  return undefined;
}

/** Why the step must not be sent, or undefined. */
export function copyStepProblem(step: CopyStep, v: CopyView): StepProblem | undefined {
  switch (step.op) {
    case 'create':
    case 'clone': {
      const newid = step.op === 'create' ? step.vmid : step.newid;
      if (v.vmids.has(newid)) return problem('referenced', `VMID ${newid} is taken`);
      if (step.record.controller !== v.controllerVmId) return problem('foreign-key', 'a record of another controller');
      if (step.op === 'create') return undefined;
      const f = ours(v, step.vmid, ['copy']);
      if (isProblem(f)) return f;
      const section = v.host.snapshots.get(step.vmid)?.find((s) => s.name === step.snapname);
      if (!section) return problem('referenced', `VM ${step.vmid} has no snapshot ${step.snapname}`);
      const drives = Object.entries(section.values).filter(
        ([k, val]) => !k.startsWith('unused') && volidOfValue(k, val),
      );
      return drives.length === 1 && drives[0]?.[0] === 'scsi0'
        ? undefined
        : problem('foreign-key', `snapshot ${step.snapname} of VM ${step.vmid} holds more than the one disk`);
    }
    case 'hold':
    case 'snapshot': {
      const f = ours(v, step.vmid, ['copy']);
      if (isProblem(f)) return f;
      const source = copySourceProblem(v, step.volid, isDriverDisk(step.volid, v.controllerVmId));
      if (source) return source;
      const others = f.drives.filter((d) => !(d.key === 'scsi0' && d.volid === step.volid));
      if (others.length > 0) return problem('foreign-key', `copy VM ${step.vmid} holds ${others[0]?.volid ?? ''}`);
      if (step.op === 'snapshot' && f.drives.length === 0)
        return problem('referenced', `copy VM ${step.vmid} does not hold ${step.volid}`);
      return f.owned.length ? problem('foreign-key', `copy VM ${step.vmid} owns ${f.owned.join(', ')}`) : undefined;
    }
    case 'unsnapshot': {
      const f = ours(v, step.vmid, ['copy']);
      return isProblem(f) ? f : unsnapshotProblem(v, f, step.snapname);
    }
    case 'grow':
    case 'detach':
    case 'release': {
      const f = ours(v, step.vmid, ['volume']);
      if (isProblem(f)) return f;
      if (step.op !== 'release') {
        const d = f.drives;
        return d.length === 1 && d[0]?.key === 'scsi0' && f.owned.includes(d[0].volid)
          ? undefined
          : problem('foreign-key', `volume VM ${step.vmid} does not hold exactly its clone as scsi0`);
      }
      const held = f.entries.find((e) => e.key === step.key)?.value;
      return step.key.startsWith('unused') && held && f.owned.includes(held) && f.drives.length === 0
        ? undefined
        : problem('foreign-key', `${step.key} of volume VM ${step.vmid} is not its own detached clone`);
    }
    case 'migrate':
      return migrateProblem(step, v);
    case 'free': {
      const f = ours(v, step.vmid, ['volume']);
      if (isProblem(f)) return f;
      if (diskOwner(parseVolid(step.volid)?.disk ?? '') !== step.vmid)
        return problem('not-driver-disk', `${step.volid} is not the disk of volume VM ${step.vmid}`);
      return referencesProblem(v, step.volid);
    }
    case 'destroy': {
      const f = ours(v, step.vmid, ['copy', 'snapshot', 'volume']);
      if (isProblem(f)) return f;
      // A copy VM owns nothing (its disk is the source's); a snapshot VM owns its clone; a volume
      // VM references only placeholders once its clone is released (destroying it frees none).
      if (f.record?.role === 'copy' && f.owned.length)
        return problem('foreign-key', `copy VM ${step.vmid} owns ${f.owned.join(', ')}`);
      // Its snapshot goes first (unsnapshot's rule): one the driver may not delete keeps the VM.
      if (f.record?.role === 'copy' && (v.host.snapshots.get(step.vmid) ?? []).length)
        return problem('referenced', `copy VM ${step.vmid} still has a snapshot section`);
      if (f.owned.length > 1) return problem('foreign-key', `VM ${step.vmid} owns more than one disk`);
      // A snapshot's clone being copied by a restore (a copy VM holds it) stays until that ends.
      const own = f.owned[0];
      const others: CopyView = {
        ...v,
        host: { ...v.host, entries: v.host.entries.filter((e) => e.vm.vmid !== step.vmid) },
      };
      return own && f.record?.role === 'snapshot' ? referencesProblem(others, own) : undefined;
    }
  }
}

/**
 * An offline migration copies every volume the VM's config references and frees the source copies
 * (QemuMigrate scan_local_volumes, phase3_cleanup): the volume VM may reference only its own clone,
 * as scsi0, with no snapshot section (Proxmox refuses `non-migratable snapshot exists` on LVM-thin,
 * and the snapshot's LVs would stay behind), and no other VM of the host may reference the clone
 * (it would lose its disk). On the target, the storage must be there and hold no volume of the
 * volume VM's VMID: Proxmox would import under another name, and the one found there would then
 * pass for the volume VM's own disk.
 */
function migrateProblem(step: Extract<CopyStep, { op: 'migrate' }>, v: CopyView): StepProblem | undefined {
  const f = ours(v, step.vmid, ['volume']);
  if (isProblem(f)) return f;
  if (step.target === step.node) return problem('foreign-key', `volume VM ${step.vmid} is on ${step.target} already`);
  const d = f.drives;
  const unused = f.entries.filter((e) => e.key.startsWith('unused') && e.value && volidOfValue(e.key, e.value));
  if (!(d.length === 1 && d[0]?.key === 'scsi0' && d[0].volid === step.volid && f.owned.includes(step.volid)))
    return problem('foreign-key', `volume VM ${step.vmid} does not hold exactly its clone ${step.volid} as scsi0`);
  if (unused.length > 0 || f.owned.length !== 1)
    return problem('foreign-key', `volume VM ${step.vmid} references more than its clone (${f.owned.join(', ')})`);
  if ((v.host.snapshots.get(step.vmid) ?? []).length > 0)
    return problem('foreign-key', `volume VM ${step.vmid} has a snapshot section`);
  const others: CopyView = {
    ...v,
    host: { ...v.host, entries: v.host.entries.filter((e) => e.vm.vmid !== step.vmid) },
  };
  const ref = referencesProblem(others, step.volid);
  if (ref) return ref;
  const t = v.target;
  const storage = parseVolid(step.volid)?.storage ?? '';
  if (t?.node !== step.target) return problem('referenced', `the target host ${step.target} was not read`);
  if (!t.storages.includes(storage))
    return problem('referenced', `storage ${storage} is not available on ${step.target}`);
  const there = t.volids.filter((x) => diskOwner(parseVolid(x)?.disk ?? '') === step.vmid);
  return there.length
    ? problem('referenced', `${step.target} already holds ${there.join(', ')} of VMID ${step.vmid}`)
    : undefined;
}

/** Any reference to the volume, in any VM's config, pending or snapshot section on the host. */
function referencesProblem(v: CopyView, volid: string): StepProblem | undefined {
  for (const e of v.host.entries)
    for (const x of e.entries)
      for (const value of [x.value, x.pending])
        if (value !== undefined && volidOfValue(x.key, value) === volid)
          return problem('referenced', `${volid} is ${x.key} of VM ${e.vm.name} (${e.vm.vmid}): unpublish it first`);
  for (const [vmid, sections] of v.host.snapshots)
    for (const s of sections)
      for (const [k, value] of Object.entries(s.values))
        if (volidOfValue(k, value) === volid)
          return problem('referenced', `${volid} is ${k} in snapshot ${s.name} of VM ${vmid}`);
  return undefined;
}
