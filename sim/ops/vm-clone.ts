// qemu-server clone_vm (POST …/clone) for a stopped source, and move_vm_disk's reassign branch
// (POST …/move_disk with target-vmid):
// - clone: the new VM's config exists with `lock: clone` while its drives are cloned; keys of
//   the source (or of the snapshot section) are copied except the snapshot keys and unusedN,
//   `template` dropped, a new smbios1 uuid, name `Copy-of-VM-<name|vmid>` unless given; a
//   CD-ROM is copied as is; every other drive is a linked clone (vdisk_clone: from the snapshot)
//   or, with `full`, a full copy into `vm-<newid>-disk-N` on the same or the given storage. A
//   failure frees the new volumes and removes the new config (`clone failed: …`).
// - reassign: both VMs on one node, not locked, no templates; the disk must exist, not be a
//   CD-ROM nor used by a snapshot, the source VM must be stopped unless the key is unusedN, the
//   target key free; the volume is renamed to the target's next `vm-<target>-disk-N`, the key
//   leaves the source (and its boot order) and is set on the target.

import { fail } from '../http/errors.js';
import { isCdrom, isDriveKey, parseDrive, parseVolid, printDrive } from '../model/drive.js';
import type { VmModel } from '../model/types.js';
import { bootDevices } from '../model/vmconfig.js';
import type { TaskLog } from '../tasks.js';
import { type SimContext, findVolume, getStorage, withVmLock } from './context.js';
import { createLockedVm } from './vm-lifecycle.js';
import { allocVolume, freeVolume } from './storage.js';
import { cloneVolume, renameVolume } from './thin-snapshot.js';

const NOT_COPIED = new Set(['snapshots', 'parent', 'snaptime', 'vmstate', 'snapstate', 'runningcpu', 'runningmachine']);

export interface CloneRequest {
  newid: number;
  snapname?: string | undefined;
  full: boolean;
  storage?: string | undefined;
  name?: string | undefined;
  description?: string | undefined;
}

/** The keys clone_vm's load_and_check reads: the snapshot section or the current config. */
export function cloneSource(vm: VmModel, snapname: string | undefined): Map<string, string> {
  if (snapname === undefined) return vm.config;
  const section = vm.snapshots.get(snapname);
  if (!section) throw fail(`snapshot '${snapname}' does not exist`);
  return section;
}

/** load_and_check's per-drive feature check (LvmThinPlugin: clone from `snap`/`base`, copy from any). */
export function checkCloneFeatures(ctx: SimContext, vm: VmModel, req: CloneRequest): void {
  for (const [k, v] of cloneSource(vm, req.snapname)) {
    if (!isDriveKey(k)) continue;
    const drive = parseDrive(k, v);
    if (isCdrom(drive)) continue;
    const what = `feature is not supported for${req.snapname ? ' a snapshot of' : ''} '${drive.file}' (${k})`;
    const ref = parseVolid(drive.file);
    const exists = ref !== undefined && findVolume(ctx, vm.node, drive.file) !== undefined;
    if (req.full || k === 'tpmstate0') {
      if (!exists) throw fail(`Full clone ${what}`);
    } else if (!exists || (req.snapname === undefined && !ref.volname.startsWith('base-'))) {
      throw fail(`Linked clone ${what}`);
    }
  }
}

async function cloneDrives(
  ctx: SimContext,
  vm: VmModel,
  target: VmModel,
  req: CloneRequest,
  log: TaskLog,
  made: string[],
) {
  for (const [k, v] of [...cloneSource(vm, req.snapname)].sort(([a], [b]) => (a < b ? -1 : 1))) {
    if (!isDriveKey(k)) continue;
    const drive = parseDrive(k, v);
    if (isCdrom(drive)) continue;
    const ref = parseVolid(drive.file);
    const source = ref ? findVolume(ctx, vm.node, drive.file) : undefined;
    if (!ref || !source) throw fail(`volume '${drive.file}' does not exist`);
    log.print(`create ${req.full ? 'full' : 'linked'} clone of drive ${k} (${drive.file})`);
    let volid: string;
    if (req.full) {
      const storage = req.storage ?? ref.storage;
      volid = await allocVolume(ctx, vm.node, storage, req.newid, undefined, source.sizeBytes / 1024, 'raw');
      made.push(volid);
      const copy = findVolume(ctx, vm.node, volid);
      const from = req.snapname ? source.snapshots?.get(req.snapname)?.filePath : source.filePath;
      if (copy?.filePath && from && ctx.backend.files)
        await ctx.backend.files.copy(from, copy.filePath, source.sizeBytes);
    } else {
      volid = await cloneVolume(ctx, vm.node, ref.storage, ref.volname, req.snapname, req.newid);
      made.push(volid);
    }
    target.config.set(k, printDrive({ ...drive, file: volid }));
  }
}

/** The qmclone worker; `running` sources are refused by the route (drive-mirror is not modelled). */
export async function cloneVm(ctx: SimContext, vm: VmModel, req: CloneRequest, log: TaskLog): Promise<void> {
  log.print(`creating a clone of VM ${vm.vmid} with ID ${req.newid}`);
  const target = createLockedVm(ctx, vm.node, req.newid);
  target.config.set('lock', 'clone');
  const made: string[] = [];
  try {
    await withVmLock(ctx, target, async () => {
      const source = cloneSource(vm, req.snapname);
      for (const [k, v] of source) {
        if (NOT_COPIED.has(k) || /^unused\d+$/.test(k) || k === 'lock' || k === 'template') continue;
        if (isDriveKey(k) && !isCdrom(parseDrive(k, v))) continue;
        target.config.set(k, v);
      }
      target.config.set('smbios1', `uuid=${crypto.randomUUID()}`);
      target.config.set('name', req.name ?? `Copy-of-VM-${vm.config.get('name') ?? vm.vmid}`);
      if (req.description) target.config.set('description', req.description);
      await cloneDrives(ctx, vm, target, req, log, made);
      target.config.delete('lock');
    });
  } catch (e) {
    for (const volid of made) {
      const ref = parseVolid(volid);
      if (!ref) continue;
      try {
        await freeVolume(ctx, vm.node, ref.storage, ref.volname, log);
      } catch (free) {
        log.warn((free as Error).message);
      }
    }
    ctx.state.vms.delete(req.newid);
    throw fail(`clone failed: ${(e as Error).message}`);
  }
}

/**
 * QemuServer::Drive is_volume_in_use: a drive key (not unusedN, not a CD-ROM) of the current
 * config other than `skip`, or of any snapshot section (`skip` no longer applies there), uses it.
 */
export function isVolumeInUse(vm: VmModel, skip: string, volid: string): boolean {
  const scan = (keys: Map<string, string>, skipKey: string | undefined) =>
    [...keys].some(([k, v]) => {
      if (!isDriveKey(k) || k === skipKey) return false;
      const drive = parseDrive(k, v);
      return !isCdrom(drive) && drive.file === volid;
    });
  return scan(vm.config, skip) || [...vm.snapshots.values()].some((s) => scan(s, undefined));
}

export interface ReassignRequest {
  disk: string;
  targetDisk: string;
}

/** load_and_check_reassign_configs; returns the drive (or unusedN volid) and its volume id. */
export function checkReassign(ctx: SimContext, vm: VmModel, target: VmModel, req: ReassignRequest): string {
  if (vm.node !== target.node) throw fail(`Both VMs need to be on the same node (${vm.node} != ${target.node})`);
  for (const v of [vm, target]) {
    const lock = v.config.get('lock');
    if (lock) throw fail(`VM is locked (${lock})`);
  }
  if (vm.config.get('template') === '1' || target.config.get('template') === '1')
    throw fail("Can't move disks from or to template VMs");
  const value = vm.config.get(req.disk);
  if (value === undefined) throw fail(`Disk '${req.disk}' for VM '${vm.vmid}' does not exist`);
  if (target.config.has(req.targetDisk))
    throw fail(`Target disk key '${req.targetDisk}' is already in use for VM '${target.vmid}'`);
  const unused = /^unused\d+$/.test(req.disk);
  const file = unused ? value : parseDrive(req.disk, value).file;
  if (!unused && isCdrom(parseDrive(req.disk, value))) throw fail("CD drive contents can't be moved to another VM");
  const ref = parseVolid(file);
  if (!ref) throw fail(`Volume '${file}' not managed by PVE`);
  getStorage(ctx, vm.node, ref.storage);
  if (isVolumeInUse(vm, req.disk, file)) throw fail("Can't move disk used by a snapshot to another VM");
  if (vm.status === 'running' && !unused)
    throw fail('Cannot move disk to another VM while the source VM is running - detach first');
  if (target.status === 'running' && !/^unused\d+$/.test(req.targetDisk))
    throw fail('hot-plugging a reassigned disk into a running VM is not modelled by the simulator');
  return value;
}

/** The qmmove worker of a reassign, under both config locks. */
export async function reassignDisk(
  ctx: SimContext,
  vm: VmModel,
  target: VmModel,
  req: ReassignRequest,
  log: TaskLog,
): Promise<void> {
  await withVmLock(ctx, vm, () =>
    withVmLock(ctx, target, async () => {
      const value = checkReassign(ctx, vm, target, req);
      log.print(`reassign disk '${req.disk}' from VM '${vm.vmid}' as '${req.targetDisk}' to VM '${target.vmid}'`);
      const unused = /^unused\d+$/.test(req.disk);
      const drive = unused ? undefined : parseDrive(req.disk, value);
      const file = drive?.file ?? value;
      const ref = parseVolid(file);
      if (!ref) throw fail(`Volume '${file}' not managed by PVE`);
      const volid = await renameVolume(ctx, vm.node, ref.storage, ref.volname, target.vmid);
      if (bootDevices(vm).has(req.disk)) {
        log.print(`removing disk '${req.disk}' from boot order config`);
        const order = [...bootDevices(vm)].filter((d) => d !== req.disk);
        vm.config.set('boot', `order=${order.join(';')}`);
      }
      vm.config.delete(req.disk);
      log.print(`removing disk '${req.disk}' from VM '${vm.vmid}' config`);
      const targetUnused = /^unused\d+$/.test(req.targetDisk);
      target.config.set(req.targetDisk, targetUnused ? volid : printDrive({ file: volid, opts: drive?.opts ?? {} }));
    }),
  );
}
