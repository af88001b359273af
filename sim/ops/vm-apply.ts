// Applying the pending section: hot-plug on a running VM (vmconfig_hotplug_pending) or cold apply
// on a stopped one (vmconfig_apply_pending). A change that cannot be hot-plugged stays pending,
// silently ("skip") or with `hotplug problem - …` in the errors that become an HTTP 400.

import type { IoLimits, PlugDisk } from '../backend/types.js';
import { fail } from '../http/errors.js';
import { type Drive, driveSlot, isCdrom, isDriveKey, parseDrive, parseVolid, volumeOwner } from '../model/drive.js';
import type { VmModel } from '../model/types.js';
import { bootDevices, registerUnused, volumeReferenced } from '../model/vmconfig.js';
import { type SimContext, findVolume, vmRef } from './context.js';
import { freeVolume } from './storage.js';

class Skip extends Error {}

/** Options qemu-server applies at once even on a running VM. */
const FAST_PLUG = new Set([
  'name',
  'onboot',
  'shares',
  'startup',
  'description',
  'protection',
  'vmstatestorage',
  'hookscript',
  'tags',
]);
// vmconfig_update_disk: a change of one of these on an attached disk stays pending ("skip")…
const NOT_HOTPLUGGABLE_DISK_OPTS = ['aio', 'discard', 'iothread', 'queues', 'product', 'cache', 'ssd', 'vendor', 'ro'];
// …one of these goes to QEMU at once (set_io_throttle); anything else (backup, wwn, serial,
// size…) is written to the config only.
const THROTTLE_OPTS = ['mbps', 'mbps_rd', 'mbps_wr', 'iops', 'iops_rd', 'iops_wr'];
const THROTTLE_BURST_OPTS = [
  'mbps_max',
  'mbps_rd_max',
  'mbps_wr_max',
  'iops_max',
  'iops_rd_max',
  'iops_wr_max',
  'bps_max_length',
  'bps_rd_max_length',
  'bps_wr_max_length',
  'iops_max_length',
  'iops_rd_max_length',
  'iops_wr_max_length',
];

const num = (v: string | undefined): number => Number(v ?? 0) || 0;

/** The limits qemu-server hands QEMU for a drive (MB/s → bytes/s); undefined when it has none. */
export function ioLimits(drive: Drive): IoLimits | undefined {
  if (!THROTTLE_OPTS.some((o) => num(drive.opts[o]) > 0)) return undefined;
  const bps = (o: string) => Math.trunc(num(drive.opts[o]) * 1024 * 1024);
  const iops = (o: string) => Math.trunc(num(drive.opts[o]));
  return {
    bps: bps('mbps'),
    bps_rd: bps('mbps_rd'),
    bps_wr: bps('mbps_wr'),
    iops: iops('iops'),
    iops_rd: iops('iops_rd'),
    iops_wr: iops('iops_wr'),
  };
}

function hotplugFeatures(vm: VmModel): Set<string> {
  const v = vm.config.get('hotplug') ?? '1';
  if (v === '1') return new Set(['network', 'disk', 'usb']);
  if (v === '0') return new Set();
  return new Set(v.split(','));
}

/** try_deallocate_drive: frees a volume this VM owns; a foreign one is only dropped from the config. */
export async function tryDeallocate(
  ctx: SimContext,
  vm: VmModel,
  key: string,
  file: string,
  force: boolean,
): Promise<boolean> {
  if (!(force || /^unused\d+$/.test(key))) return false;
  const ref = parseVolid(file);
  if (!ref || volumeOwner(ref.volname) !== vm.vmid) return true;
  if (volumeReferenced(vm, file, key)) throw fail(`unable to delete '${file}' - volume is still in use (snapshot?)`);
  await freeVolume(ctx, vm.node, ref.storage, ref.volname, undefined, { vmid: vm.vmid, key });
  return true;
}

async function deleteOrDetachDrive(ctx: SimContext, vm: VmModel, key: string, force: boolean): Promise<void> {
  const value = vm.config.get(key);
  if (value === undefined) return;
  const drive = parseDrive(key, value);
  if (force) await tryDeallocate(ctx, vm, key, drive.file, true);
  else if (!isCdrom(drive) && parseVolid(drive.file)) registerUnused(vm, drive.file);
}

function plugDisk(ctx: SimContext, vm: VmModel, key: string, drive: Drive): PlugDisk | undefined {
  const vol = parseVolid(drive.file) ? findVolume(ctx, vm.node, drive.file) : undefined;
  if (!vol?.filePath) return undefined;
  const { bus, index } = driveSlot(key);
  const limits = ioLimits(drive);
  return {
    slot: key,
    bus,
    index,
    filePath: vol.filePath,
    ...(drive.opts.wwn ? { wwn: drive.opts.wwn } : {}),
    ...(limits ? { limits } : {}),
  };
}

/** Config keys whose volume has a backing file, i.e. the disks the backend can have plugged. */
export function backedDriveKeys(ctx: SimContext, vm: VmModel): string[] {
  return [...vm.config].flatMap(([key, value]) => {
    if (!isDriveKey(key)) return [];
    try {
      return plugDisk(ctx, vm, key, parseDrive(key, value)) ? [key] : [];
    } catch {
      return [];
    }
  });
}

export async function plugDrive(ctx: SimContext, vm: VmModel, key: string, drive: Drive): Promise<void> {
  const disk = plugDisk(ctx, vm, key, drive);
  if (disk) await ctx.backend.hotplug.plug(vmRef(vm), disk);
}

async function unplugDrive(ctx: SimContext, vm: VmModel, key: string): Promise<void> {
  if (bootDevices(vm).has(key)) throw new Error(`can't unplug bootdisk '${key}'`);
  // `silent` acts through the VM's hotplug option (detach-fault.ts), never here.
  if (ctx.faults.detachMode(vm.vmid) === 'error') throw new Error(`error on hot-unplugging device '${key}'`);
  await ctx.backend.hotplug.unplug(vmRef(vm), key);
}

/** vmconfig_update_disk: same volume = option update (some need a restart), new volume = replug. */
async function updateDisk(
  ctx: SimContext,
  vm: VmModel,
  key: string,
  value: string,
  diskHotplug: boolean,
): Promise<void> {
  const drive = parseDrive(key, value);
  const oldValue = vm.config.get(key);
  if (oldValue !== undefined) {
    const old = parseDrive(key, oldValue);
    if ((drive.opts.media ?? 'disk') !== (old.opts.media ?? 'disk')) throw new Error('unable to change media type');
    if (!isCdrom(old)) {
      if (drive.file === old.file) {
        for (const o of NOT_HOTPLUGGABLE_DISK_OPTS) if (drive.opts[o] !== old.opts[o]) throw new Skip();
        if ([...THROTTLE_OPTS, ...THROTTLE_BURST_OPTS].some((o) => num(drive.opts[o]) !== num(old.opts[o]))) {
          const limits = ioLimits(drive) ?? { bps: 0, bps_rd: 0, bps_wr: 0, iops: 0, iops_rd: 0, iops_wr: 0 };
          await ctx.backend.hotplug.throttle(vmRef(vm), key, limits);
        }
        return;
      }
      if (!diskHotplug) throw new Skip();
      await unplugDrive(ctx, vm, key);
      if (parseVolid(old.file)) registerUnused(vm, old.file);
    }
  }
  if (!diskHotplug || /^(ide|sata)\d+$/.test(key)) throw new Skip();
  await plugDrive(ctx, vm, key, drive);
}

function hotplugProblem(errors: Record<string, string>, key: string, e: unknown): void {
  if (e instanceof Skip) return;
  const msg = e instanceof Error ? e.message : String(e);
  errors[key] = `hotplug problem - ${msg.replace(/\n$/, '')}`;
}

export async function hotplugPending(
  ctx: SimContext,
  vm: VmModel,
  modified: Set<string>,
  errors: Record<string, string>,
): Promise<void> {
  const features = hotplugFeatures(vm);
  for (const [k, v] of [...vm.pending]) {
    if (FAST_PLUG.has(k)) {
      vm.config.set(k, v);
      vm.pending.delete(k);
    }
  }
  for (const [key, force] of [...vm.pendingDelete].sort(([a], [b]) => a.localeCompare(b))) {
    if (!modified.has(key)) continue;
    try {
      if (isDriveKey(key)) {
        if (!features.has('disk') || /^(ide|sata)\d+$/.test(key)) throw new Skip();
        await unplugDrive(ctx, vm, key);
        await deleteOrDetachDrive(ctx, vm, key, force);
      } else if (!FAST_PLUG.has(key)) {
        throw new Skip();
      }
      vm.config.delete(key);
      vm.pendingDelete.delete(key);
    } catch (e) {
      hotplugProblem(errors, key, e);
    }
  }
  for (const [key, value] of [...vm.pending]) {
    if (!modified.has(key)) continue;
    try {
      if (!isDriveKey(key)) throw new Skip();
      await updateDisk(ctx, vm, key, value, features.has('disk'));
      vm.config.set(key, value);
      vm.pending.delete(key);
    } catch (e) {
      hotplugProblem(errors, key, e);
    }
  }
}

export async function applyPending(ctx: SimContext, vm: VmModel, errors: Record<string, string>): Promise<void> {
  const applyError = (key: string, e: unknown) => {
    errors[key] = `unable to apply pending change ${key} : ${(e as Error).message.replace(/\n$/, '')}`;
  };
  for (const [key, force] of [...vm.pendingDelete].sort(([a], [b]) => a.localeCompare(b))) {
    try {
      if (vm.config.has(key) && isDriveKey(key)) await deleteOrDetachDrive(ctx, vm, key, force);
      vm.pendingDelete.delete(key);
      vm.config.delete(key);
    } catch (e) {
      applyError(key, e);
    }
  }
  for (const [key, value] of [...vm.pending]) {
    try {
      const old = vm.config.get(key);
      if (old !== undefined && isDriveKey(key)) {
        const o = parseDrive(key, old);
        if (!isCdrom(o) && parseVolid(o.file) && o.file !== parseDrive(key, value).file) registerUnused(vm, o.file);
      }
      vm.config.set(key, value);
      vm.pending.delete(key);
    } catch (e) {
      applyError(key, e);
    }
  }
}

/** Admin start/stop: a started VM gets its disks plugged (pending applied first), a stopped one unplugged. */
export async function setVmStatus(ctx: SimContext, vm: VmModel, status: 'running' | 'stopped'): Promise<void> {
  if (vm.status === status) return;
  if (status === 'stopped') {
    for (const key of backedDriveKeys(ctx, vm)) await ctx.backend.hotplug.unplug(vmRef(vm), key);
    vm.status = 'stopped';
    return;
  }
  await applyPending(ctx, vm, {});
  vm.status = 'running';
  vm.startedAt = ctx.nowSec();
  for (const [key, value] of vm.config) {
    if (isDriveKey(key)) await plugDrive(ctx, vm, key, parseDrive(key, value));
  }
}
