// qemu-server's resize_vm worker body: grow the volume, tell a running guest, record `size=`.

import { fail } from '../http/errors.js';
import { isCdrom, parseDrive, parseVolid, printDrive } from '../model/drive.js';
import { parseResizeSize } from '../model/sizes.js';
import type { VmModel } from '../model/types.js';
import { type SimContext, findVolume, vmRef } from './context.js';
import { resizeVolume } from './storage.js';
import { checkDigestAndLock } from './vm-update.js';

export interface ResizeRequest {
  disk: string;
  size: string;
  digest?: string;
  skiplock: boolean;
  /** Raises 403 when the caller lacks a privilege on a path (checked inside the worker, as PVE does). */
  checkPriv: (path: string, priv: string) => void;
}

export async function resizeLocked(ctx: SimContext, vm: VmModel, req: ResizeRequest): Promise<void> {
  checkDigestAndLock(vm, req.digest, req.skiplock);
  const value = vm.config.get(req.disk);
  if (value === undefined) throw fail(`disk '${req.disk}' does not exist`);
  const drive = parseDrive(req.disk, value);
  if (isCdrom(drive)) throw fail("you can't resize a cdrom");
  const ref = parseVolid(drive.file);
  if (!ref) throw fail(`disk '${req.disk}' has no associated volume`);
  req.checkPriv(`/storage/${ref.storage}`, 'Datastore.AllocateSpace');
  const vol = findVolume(ctx, vm.node, drive.file);
  if (!vol) throw fail(`Could not determine current size of volume '${drive.file}'`);
  const newSize = parseResizeSize(req.size, vol.sizeBytes);
  if (newSize === undefined) throw fail('internal error');
  if (newSize < vol.sizeBytes) throw fail('shrinking disks is not supported');
  if (newSize === vol.sizeBytes) return;
  await resizeVolume(ctx, vol, newSize);
  if (vm.status === 'running') await ctx.backend.hotplug.resize(vmRef(vm), req.disk, vol.sizeBytes);
  // PVE records the requested size, not the extent-rounded LV size
  drive.opts.size = String(newSize);
  vm.config.set(req.disk, printDrive(drive));
}
