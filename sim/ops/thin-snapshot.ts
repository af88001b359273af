// LVM-thin volume snapshots, linked clones and renames (pve-storage LvmThinPlugin volume_snapshot,
// volume_snapshot_delete, clone_image, LVMPlugin rename_volume, Storage vdisk_clone /
// rename_volume), with the lvcreate / lvremove / lvrename error texts PVE passes through.
// clone_image and rename_volume run under the storage lock (cluster_lock_storage), volume
// snapshots do not. With a backing file, a snapshot and a clone hold real bytes (a copy of the
// origin at that moment), so restored data can be compared byte for byte.

import { fail } from '../http/errors.js';
import type { StorageModel, VolumeModel, VolumeSnapshotModel } from '../model/types.js';
import type { TaskLog } from '../tasks.js';
import { type SimContext, getStorage, withStorageLock } from './context.js';

/** The LV name of a volume snapshot. */
export const snapLvName = (volname: string, snap: string) => `snap_${volname}_${snap}`;

/** PVE::Storage::Plugin find_free_diskname for lvmthin: the first free `vm-<vmid>-disk-N`. */
export function findFreeDiskName(st: StorageModel, vmid: number): string {
  for (let i = 0; ; i++) {
    const name = `vm-${vmid}-disk-${i}`;
    if (!st.volumes.has(name)) return name;
  }
}

function getVolume(ctx: SimContext, node: string, storage: string, volname: string): VolumeModel {
  const st = getStorage(ctx, node, storage);
  const vol = st.volumes.get(volname);
  if (!vol) throw fail(`no such logical volume ${st.vgname}/${volname}`);
  return vol;
}

/** volume_snapshot: `lvcreate -n snap_<vol>_<snap> -pr -s vg/<vol>`. */
export async function snapshotVolume(
  ctx: SimContext,
  node: string,
  storage: string,
  volname: string,
  snap: string,
  log: TaskLog,
): Promise<void> {
  const st = getStorage(ctx, node, storage);
  const vol = getVolume(ctx, node, storage, volname);
  const lv = snapLvName(volname, snap);
  const snaps = (vol.snapshots ??= new Map());
  if (snaps.has(snap))
    throw fail(
      `lvcreate snapshot '${st.vgname}/${lv}' error:   Logical Volume "${lv}" already exists in volume group "${st.vgname}"`,
    );
  const model: VolumeSnapshotModel = { ctime: ctx.nowSec() };
  const files = ctx.backend.files;
  if (vol.filePath && files) {
    model.filePath = files.pathFor(node, storage, lv);
    await files.snapshot(vol.filePath, model.filePath);
  } else if (vol.writtenBytes !== undefined) model.writtenBytes = vol.writtenBytes;
  snaps.set(snap, model);
  log.print(`  Logical volume "${lv}" created.`);
}

/** volume_snapshot_delete: `lvremove -f vg/snap_<vol>_<snap>`. */
export async function deleteVolumeSnapshot(
  ctx: SimContext,
  node: string,
  storage: string,
  volname: string,
  snap: string,
  log: TaskLog,
): Promise<void> {
  const st = getStorage(ctx, node, storage);
  const lv = snapLvName(volname, snap);
  const model = st.volumes.get(volname)?.snapshots?.get(snap);
  if (!model)
    throw fail(`lvremove snapshot '${st.vgname}/${lv}' error:   Failed to find logical volume "${st.vgname}/${lv}"`);
  if (model.filePath && ctx.backend.files) await ctx.backend.files.remove(model.filePath);
  st.volumes.get(volname)?.snapshots?.delete(snap);
  log.print(`  Logical volume "${lv}" successfully removed.`);
}

/** free_image's first step: every snapshot of the volume goes before the volume itself. */
export async function removeVolumeSnapshots(ctx: SimContext, st: StorageModel, vol: VolumeModel, log?: TaskLog) {
  for (const [snap, model] of vol.snapshots ?? []) {
    if (model.filePath && ctx.backend.files) await ctx.backend.files.remove(model.filePath);
    vol.snapshots?.delete(snap);
    log?.print(`  Logical volume "${snapLvName(vol.volname, snap)}" successfully removed.`);
  }
}

/**
 * Storage::vdisk_clone → LvmThinPlugin clone_image under the storage lock: from a snapshot
 * (`lvcreate -n vm-<vmid>-disk-N -prw -kn -s vg/snap_<vol>_<snap>`), or from a base volume
 * (templates, which the simulator does not model: `clone_image only works on base images`).
 * The clone is an ordinary thin volume of `vmid`; returns its volume id.
 */
export function cloneVolume(
  ctx: SimContext,
  node: string,
  storage: string,
  volname: string,
  snap: string | undefined,
  vmid: number,
): Promise<string> {
  const st = getStorage(ctx, node, storage);
  return withStorageLock(ctx, node, storage, async () => {
    const vol = getVolume(ctx, node, storage, volname);
    if (snap === undefined) throw fail('clone_image only works on base images');
    const source = vol.snapshots?.get(snap);
    const lv = `${st.vgname}/${snapLvName(volname, snap)}`;
    if (!source) throw fail(`clone image '${lv}' error:   Failed to find logical volume "${lv}"`);
    const name = findFreeDiskName(st, vmid);
    const clone: VolumeModel = {
      node,
      storage,
      volname: name,
      ownerVmid: vmid,
      sizeBytes: vol.sizeBytes,
      format: 'raw',
      ctime: ctx.nowSec(),
    };
    const files = ctx.backend.files;
    if (source.filePath && files) {
      clone.filePath = files.pathFor(node, storage, name);
      await files.snapshot(source.filePath, clone.filePath);
    } else if (source.writtenBytes !== undefined) clone.writtenBytes = source.writtenBytes;
    st.volumes.set(name, clone);
    return `${storage}:${name}`;
  });
}

/**
 * Storage::rename_volume → LVMPlugin rename_volume without a target name, under the storage
 * lock: `lvrename vg <vol> vm-<target>-disk-N`. Returns the new volume id. (move_disk refuses a
 * disk a snapshot section uses, so the volumes renamed here carry no snapshots of their VM.)
 */
export function renameVolume(
  ctx: SimContext,
  node: string,
  storage: string,
  volname: string,
  targetVmid: number,
): Promise<string> {
  const st = getStorage(ctx, node, storage);
  return withStorageLock(ctx, node, storage, async () => {
    const vol = getVolume(ctx, node, storage, volname);
    const name = findFreeDiskName(st, targetVmid);
    const files = ctx.backend.files;
    if (vol.filePath && files) {
      const to = files.pathFor(node, storage, name);
      await files.rename(vol.filePath, to);
      vol.filePath = to;
    }
    st.volumes.delete(volname);
    vol.volname = name;
    vol.ownerVmid = targetVmid;
    st.volumes.set(name, vol);
    return `${storage}:${name}`;
  });
}
