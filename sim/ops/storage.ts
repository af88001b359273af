// LVM-thin storage behaviour: vdisk_alloc / vdisk_free under the storage lock, with the lvcreate /
// lvremove error texts PVE passes through, extent rounding and thin over-provisioning.

import { fail } from '../http/errors.js';
import { isDriveKey } from '../model/drive.js';
import { roundUpToExtent } from '../model/sizes.js';
import type { StorageModel, VolumeModel } from '../model/types.js';
import { driveVolid } from '../model/vmconfig.js';
import type { TaskLog } from '../tasks.js';
import { type SimContext, getStorage, withStorageLock } from './context.js';
import { findFreeDiskName, removeVolumeSnapshots } from './thin-snapshot.js';
import { allocName, inUseError, reservedBytes, roundSize } from './plugins.js';
import { FORMATS } from '../model/storage-types.js';
import { defined } from '../defined.js';

/** Whether the volume's storage is shared: a running VM on any node holds it open. */
function sharedStorage(ctx: SimContext, vol: VolumeModel): boolean {
  return ctx.state.nodes.get(vol.node)?.storages.get(vol.storage)?.shared ?? false;
}

const LVM_NAME_RE = /^[a-zA-Z0-9+_.][a-zA-Z0-9+_.-]{0,126}$/;

/** PVE::Storage::vdisk_alloc: LVM-thin here, the other plugins through plugins.ts; returns the volume id. */
export async function allocVolume(
  ctx: SimContext,
  node: string,
  storage: string,
  vmid: number,
  name: string | undefined,
  sizeKiB: number,
  format: string | undefined,
): Promise<string> {
  const st = getStorage(ctx, node, storage);
  if (st.type === 'lvmthin') return allocThin(ctx, node, storage, vmid, name, sizeKiB, format);
  return withStorageLock(ctx, node, storage, async () => {
    const fmt = format ?? defined(FORMATS[st.type][0], 'the default format');
    if (sizeKiB <= 0) throw fail('Size must be greater than zero.');
    const sizeBytes = roundSize(st, sizeKiB * 1024);
    const volname = allocName(st, vmid, name, fmt, sizeBytes, (await storageUsage(ctx, st)).avail);
    const vol: VolumeModel = {
      node,
      storage,
      volname,
      ownerVmid: vmid,
      sizeBytes,
      format: fmt === 'qcow2' ? 'qcow2' : 'raw',
      ctime: ctx.nowSec(),
    };
    const files = ctx.backend.files;
    if (files) {
      vol.filePath = files.pathFor(node, storage, volname.replace('/', '-'));
      await files.create(vol.filePath, sizeBytes);
    }
    st.volumes.set(volname, vol);
    return `${storage}:${volname}`;
  });
}

/** vdisk_alloc on an lvmthin storage. */
async function allocThin(
  ctx: SimContext,
  node: string,
  storage: string,
  vmid: number,
  name: string | undefined,
  sizeKiB: number,
  format: string | undefined,
): Promise<string> {
  const st = getStorage(ctx, node, storage);
  return withStorageLock(ctx, node, storage, async () => {
    const fmt = format ?? 'raw';
    // alloc_image dies without a newline here, so Perl appends the source location
    if (fmt !== 'raw')
      throw fail(`unsupported format '${fmt}' at /usr/share/perl5/PVE/Storage/LvmThinPlugin.pm line 118.`);
    if (name && !name.startsWith(`vm-${vmid}-`)) throw fail(`illegal name '${name}' - should be 'vm-${vmid}-*'`);
    const volname = name || findFreeDiskName(st, vmid);
    const lvcreate = (msg: string) => fail(`lvcreate '${st.vgname}/${volname}' error:   ${msg}`);
    if (!LVM_NAME_RE.test(volname)) throw lvcreate(`Logical volume name "${volname}" is invalid.`);
    if (st.volumes.has(volname)) {
      throw lvcreate(`Logical Volume "${volname}" already exists in volume group "${st.vgname}"`);
    }
    if (sizeKiB <= 0) throw lvcreate('Size must be greater than zero.');
    const sizeBytes = roundUpToExtent(sizeKiB * 1024);
    if (!st.overcommit) {
      const provisioned = [...st.volumes.values()].reduce((a, v) => a + v.sizeBytes, st.baseUsedBytes);
      if (provisioned + sizeBytes > st.totalBytes) {
        throw lvcreate(
          `Cannot create new thin volume, free space in thin pool ${st.vgname}/${st.thinpool} reached threshold.`,
        );
      }
    }
    const vol: VolumeModel = {
      node,
      storage,
      volname,
      ownerVmid: vmid,
      sizeBytes,
      format: 'raw',
      ctime: ctx.nowSec(),
    };
    const files = ctx.backend.files;
    if (files) {
      vol.filePath = files.pathFor(node, storage, volname);
      await files.create(vol.filePath, sizeBytes);
    }
    st.volumes.set(volname, vol);
    return `${storage}:${volname}`;
  });
}

/** A drive slot that was just unplugged but is still in the config while the change completes. */
export interface UnpluggedSlot {
  vmid: number;
  key: string;
}

/** True when a running VM on the volume's host has it in its current config (QEMU holds it open). */
export function volumeInUse(ctx: SimContext, vol: VolumeModel, unplugged?: UnpluggedSlot): boolean {
  const volid = `${vol.storage}:${vol.volname}`;
  for (const vm of ctx.state.vms.values()) {
    if ((vm.node !== vol.node && !sharedStorage(ctx, vol)) || vm.status !== 'running') continue;
    for (const [k, v] of vm.config) {
      if (!isDriveKey(k) || (unplugged && unplugged.vmid === vm.vmid && unplugged.key === k)) continue;
      try {
        if (driveVolid(k, v) === volid) return true;
      } catch {
        // unparsable value references nothing
      }
    }
  }
  return false;
}

/**
 * PVE::Storage::vdisk_free on lvmthin: a missing LV is not an error, an open one is; the
 * volume's `snap_<volname>_*` snapshots are removed first (LvmThinPlugin free_image).
 */
export async function freeVolume(
  ctx: SimContext,
  node: string,
  storage: string,
  volname: string,
  log?: TaskLog,
  unplugged?: UnpluggedSlot,
): Promise<void> {
  const st = getStorage(ctx, node, storage);
  await withStorageLock(ctx, node, storage, async () => {
    const vol = st.volumes.get(volname);
    if (!vol) return;
    const inUse = inUseError(st, volname);
    if (inUse && volumeInUse(ctx, vol, unplugged)) throw inUse;
    if (st.type === 'lvmthin') await removeVolumeSnapshots(ctx, st, vol, log);
    if (vol.filePath && ctx.backend.files) await ctx.backend.files.remove(vol.filePath);
    st.volumes.delete(volname);
    if (st.type === 'lvmthin' || st.type === 'lvm') log?.print(`  Logical volume "${volname}" successfully removed.`);
  });
}

export async function resizeVolume(ctx: SimContext, vol: VolumeModel, newBytes: number): Promise<void> {
  const st = ctx.state.nodes.get(vol.node)?.storages.get(vol.storage);
  const size = st ? roundSize(st, newBytes) : roundUpToExtent(newBytes);
  if (vol.filePath && ctx.backend.files) await ctx.backend.files.resize(vol.filePath, size);
  vol.sizeBytes = size;
}

/**
 * A guest writes `bytes` of data into a volume from `offset`: the thin pool's data usage grows
 * by the blocks newly written (the backing file's blocks, or the written-bytes counter of a
 * volume without one), never past the volume's size. Returns the volume's bytes in the pool.
 */
export async function writeVolume(
  ctx: SimContext,
  node: string,
  storage: string,
  volname: string,
  offset: number,
  bytes: number,
): Promise<number> {
  const st = getStorage(ctx, node, storage);
  const vol = st.volumes.get(volname);
  if (!vol) throw fail(`no such logical volume ${st.vgname}/${volname}`);
  const end = Math.min(vol.sizeBytes, offset + bytes);
  const files = ctx.backend.files;
  if (vol.filePath && files) {
    await files.write(vol.filePath, offset, Math.max(0, end - offset));
    return files.allocatedBytes(vol.filePath);
  }
  vol.writtenBytes = Math.min(vol.sizeBytes, (vol.writtenBytes ?? 0) + Math.max(0, end - offset));
  return vol.writtenBytes;
}

export async function storageUsage(
  ctx: SimContext,
  st: StorageModel,
): Promise<{ total: number; used: number; avail: number }> {
  let used = st.baseUsedBytes;
  const files = ctx.backend.files;
  for (const v of st.volumes.values()) {
    // Thick LVs and non-sparse zvols take their whole size when allocated, the others as written.
    const reserved = reservedBytes(st, v);
    if (reserved > 0) used += reserved;
    else if (v.filePath && files) used += await files.allocatedBytes(v.filePath);
    else used += v.writtenBytes ?? 0;
  }
  used = Math.min(used, st.totalBytes);
  return { total: st.totalBytes, used, avail: st.totalBytes - used };
}
