// The body of qemu-server's update_vm_api (PUT/POST …/config, PUT …/unlink): write the request
// into the pending section, then hot-plug or apply it.

import { fail, paramError } from '../http/errors.js';
import {
  isCdrom,
  isDriveKey,
  isNewDiskSpec,
  parseDrive,
  parseNewDiskSpec,
  parseVolid,
  printDrive,
} from '../model/drive.js';
import type { VmModel } from '../model/types.js';
import { bootDevices, cleanupPending, configDigest, driveVolid, registerUnused } from '../model/vmconfig.js';
import type { TaskLog } from '../tasks.js';
import { type SimContext, findVolume, getStorage } from './context.js';
import { allocVolume } from './storage.js';
import { defined } from '../defined.js';
import { applyPending, hotplugPending, tryDeallocate } from './vm-apply.js';

export interface UpdateRequest {
  set: Map<string, string>;
  delete: string[];
  revert: string[];
  force: boolean;
  digest?: string;
  skiplock: boolean;
}

export const NO_LOG: TaskLog = { print: () => undefined, warn: () => undefined };

/** The checks load_and_check_config runs before forking and again under the lock. */
export function checkDigestAndLock(vm: VmModel, digest: string | undefined, skiplock: boolean): void {
  if (digest && digest !== configDigest(vm)) throw fail('checksum mismatch (file change by other user?)');
  const lock = vm.config.get('lock');
  if (lock && !skiplock) throw fail(`VM is locked (${lock})`);
}

/** create_disks for one option: allocates `storage:SIZE`, checks an existing volume, adds `size=`. */
async function createDisk(ctx: SimContext, vm: VmModel, key: string, value: string, log: TaskLog): Promise<string> {
  const drive = parseDrive(key, value);
  if (isCdrom(drive) || drive.file === 'none' || drive.file.startsWith('/')) return printDrive(drive);
  if (isNewDiskSpec(drive.file)) {
    const spec = parseNewDiskSpec(drive.file);
    if (!spec.storage) throw fail(`${key}: no storage ID specified for new disk`);
    const kib = Math.round(spec.sizeGiB * 1024 * 1024);
    const volid = await allocVolume(ctx, vm.node, spec.storage, vm.vmid, undefined, kib, drive.opts.format);
    log.print(`  Logical volume "${defined(parseVolid(volid), `volume id ${volid}`).volname}" created.`);
    drive.file = volid;
    drive.opts.size = String(defined(findVolume(ctx, vm.node, volid), `volume ${volid}`).sizeBytes);
    delete drive.opts.format;
    return printDrive(drive);
  }
  const current = vm.config.get(key);
  const isNew = !(current !== undefined && parseDrive(key, current).file === drive.file);
  if (isNew) {
    const ref = defined(parseVolid(drive.file), `volume id ${drive.file}`);
    getStorage(ctx, vm.node, ref.storage);
    const vol = findVolume(ctx, vm.node, drive.file);
    if (!vol) throw fail(`volume ${drive.file} does not exist`);
    drive.opts.size = String(vol.sizeBytes);
  }
  return printDrive(drive);
}

function paramText(req: UpdateRequest): string {
  const all: Record<string, string> = Object.fromEntries(req.set);
  if (req.delete.length) all.delete = req.delete.join(',');
  if (req.revert.length) all.revert = req.revert.join(',');
  if (req.force) all.force = '1';
  return Object.keys(all)
    .sort()
    .map((k) => `-${k} ${all[k]}`)
    .join(' ');
}

function dropFromBootOrder(vm: VmModel, key: string, modified: Set<string>): void {
  const boot = vm.pending.get('boot') ?? vm.config.get('boot');
  if (!boot || !/(?:^|,)order=/.test(boot) || !bootDevices(vm).has(key)) return;
  const order = [...bootDevices(vm)].filter((d) => d !== key);
  vm.pending.set('boot', order.length ? `order=${order.join(';')}` : '');
  modified.add('boot');
}

/** Runs under the VM config lock. Hot-plug failures end as HTTP 400 (`errors: {scsiN: …}`). */
export async function updateVmLocked(ctx: SimContext, vm: VmModel, req: UpdateRequest, log: TaskLog): Promise<void> {
  checkDigestAndLock(vm, req.digest, req.skiplock);
  log.print(`update VM ${vm.vmid}: ${paramText(req)}`);
  const modified = new Set<string>();
  const deletes = [...req.delete];
  for (const key of req.revert) {
    const value = vm.config.get(key);
    if (value !== undefined) req.set.set(key, value);
    else if (vm.pending.has(key)) deletes.push(key);
  }

  for (const key of deletes) {
    modified.add(key);
    const value = vm.config.get(key) ?? vm.pending.get(key);
    if (value === undefined) {
      log.warn(`cannot delete '${key}' - not set in current configuration!`);
      modified.delete(key);
      continue;
    }
    const pendingValue = vm.pending.get(key);
    vm.pending.delete(key);
    dropFromBootOrder(vm, key, modified);
    if (/^unused\d+$/.test(key)) {
      if (await tryDeallocate(ctx, vm, key, value, false)) vm.config.delete(key);
    } else if (isDriveKey(key)) {
      if (pendingValue !== undefined) {
        const volid = driveVolid(key, pendingValue);
        if (volid) registerUnused(vm, volid);
      }
      vm.pendingDelete.set(key, req.force);
    } else {
      vm.pendingDelete.set(key, req.force);
    }
  }

  for (const [key, value] of req.set) {
    modified.add(key);
    if (vm.pending.get(key) === value) continue;
    if (isDriveKey(key)) {
      const old = vm.pending.get(key);
      if (old !== undefined) {
        const volid = driveVolid(key, old);
        if (volid) registerUnused(vm, volid);
      }
      vm.pending.set(key, await createDisk(ctx, vm, key, value, log));
    } else {
      vm.pending.set(key, value);
    }
    vm.pendingDelete.delete(key);
  }

  cleanupPending(vm);
  if (vm.pending.size === 0 && vm.pendingDelete.size === 0) return;

  const errors: Record<string, string> = {};
  if (vm.status === 'running') await hotplugPending(ctx, vm, modified, errors);
  else await applyPending(ctx, vm, errors);
  if (Object.keys(errors).length > 0) throw paramError(errors);
}
