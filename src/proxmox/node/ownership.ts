// Whether a mount at a node path is a Proxmox volume this plugin may unmount. The WWN the
// controller gives a disk names its SCSI slot (PVC-ID01…), not the volume, and NodeUnpublish /
// NodeUnstage get only the volume id and the path, so "ours" is proven from the mount itself:
// the filesystem (or the device node bound onto a file) is a disk this driver attached — a QEMU
// disk with a PVC-ID WWN — or a disk that has since been unplugged (its mount outlives it and
// only this plugin stages disks under the kubelet directory), or a LUKS mapping on such a disk.
// Network filesystems, tmpfs, overlay, the host's own disks: never. Proxmox unmounts are also
// never forced or lazy.
import type { BlockDevices } from '../../os/blockdevices.js';
import type { Cryptsetup } from '../../os/cryptsetup.js';
import type { MountEntry } from '../../os/mounter.js';

/** Filesystems a bound device node can sit on; stat of a node there is local and cannot hang. */
const DEVICE_NODE_FS = new Set(['devtmpfs', 'tmpfs']);

/**
 * The block device behind a mount: the filesystem's device for a disk-backed filesystem, or the
 * device node bound at `target` (an anonymous-device mount of devtmpfs/tmpfs). Anything else —
 * NFS, FUSE, overlay, a remote filesystem that may hang — is never stat'ed and never a disk.
 */
export async function mountedDevice(
  blockDevices: BlockDevices,
  entry: MountEntry,
  target: string,
): Promise<string | undefined> {
  if (entry.majMin && !entry.majMin.startsWith('0:')) return entry.majMin;
  if (!DEVICE_NODE_FS.has(entry.fstype)) return undefined;
  return blockDevices.majMinOf(target).catch(() => undefined);
}

async function driverDiskOrGone(blockDevices: BlockDevices, majMin: string): Promise<boolean> {
  return (await blockDevices.isDriverDisk(majMin)) || !(await blockDevices.blockDeviceExists(majMin));
}

export async function proxmoxMountOwnership(
  d: { blockDevices: BlockDevices; cryptsetup: Cryptsetup },
  entry: MountEntry,
  target: string,
): Promise<{ ours: boolean; why: string }> {
  const majMin = await mountedDevice(d.blockDevices, entry, target);
  if (!majMin) return { ours: false, why: 'not a disk' };
  if (await driverDiskOrGone(d.blockDevices, majMin)) return { ours: true, why: '' };
  const mapping = await d.cryptsetup.byMajMin(majMin);
  if (mapping && mapping.backing.length > 0) {
    let all = true;
    for (const b of mapping.backing) all &&= await driverDiskOrGone(d.blockDevices, b);
    if (all) return { ours: true, why: '' };
    return { ours: false, why: `LUKS mapping ${mapping.name} is not on a disk this driver attached` };
  }
  return { ours: false, why: `disk ${majMin} was not attached by this driver (no PVC-ID WWN)` };
}
