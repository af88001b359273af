// What the two halves of csi.proxmox.sinextra.dev must agree on, in one place: the controller
// writes these (volume context, publish context, drive WWNs, topology) and the node reads them.
// Both halves, the chart tests and `move` (src/cli/move: a moved PV's node affinity) import it; the
// values are upstream proxmox-csi-plugin's, so PVs and VolumeAttachments it made read alike.

export const PROXMOX_DRIVER_NAME = 'csi.proxmox.sinextra.dev';

// ---- topology ----------------------------------------------------------------------------
/** The segments NodeGetInfo reports and CreateVolume's accessibility requirements carry. */
export const TOPOLOGY_REGION_KEY = 'topology.kubernetes.io/region';
export const TOPOLOGY_ZONE_KEY = 'topology.kubernetes.io/zone';
/** Set by the Proxmox cloud controller manager; take precedence over the generic labels, as upstream. */
export const PROXMOX_REGION_LABEL = 'topology.proxmox.sinextra.dev/region';
export const PROXMOX_NODE_LABEL = 'topology.proxmox.sinextra.dev/node';

// ---- volume context (the StorageClass parameters the node reads) ---------------------------
// The provisioner's fstype key is both a StorageClass parameter and the volume-context key.
export const FSTYPE_KEY = 'csi.storage.k8s.io/fstype';
export const VOLUME_CONTEXT_BLOCK_SIZE = 'blockSize';
export const VOLUME_CONTEXT_INODE_SIZE = 'inodeSize';
/** Ours, not upstream's: the node refuses to stage the volume without LUKS (luks.ts). */
export const VOLUME_CONTEXT_ENCRYPTED = 'encrypted';
/** The filesystems either half accepts. */
export const FS_TYPES = ['ext4', 'xfs'] as const;
export type FsTypeName = (typeof FS_TYPES)[number];

// ---- SCSI slots and the publish context ----------------------------------------------------
/** scsi1..scsi30: the slots the controller attaches volumes to (scsi0 is the VM's boot disk). */
export const MIN_SLOT = 1;
export const MAX_SLOT = 30;

/** ControllerPublishVolume's answer: { DevicePath: "/dev/disk/by-id/wwn-0x5056432d49443031", lun: "1" }. */
export const PUBLISH_CONTEXT_DEVICE_PATH = 'DevicePath';
export const PUBLISH_CONTEXT_LUN = 'lun';

export function publishContextForSlot(slot: number): Record<string, string> {
  return {
    [PUBLISH_CONTEXT_DEVICE_PATH]: `/dev/disk/by-id/wwn-${wwnForSlot(slot)}`,
    [PUBLISH_CONTEXT_LUN]: String(slot),
  };
}

// ---- WWN schemes ---------------------------------------------------------------------------
// The controller sets the WWN on the drive, the node finds the disk by it. Hex forms are
// lowercase without `0x` (as sysfs shows them, after `naa.`); Proxmox's `wwn=` wants `0x`.

/** Upstream's scheme: the hex of the ASCII text `PVC-ID%02d`, e.g. slot 1 → 5056432d49443031. */
export function wwnHexForSlot(slot: number): string {
  return Buffer.from(`PVC-ID${String(slot).padStart(2, '0')}`, 'ascii').toString('hex');
}

/** The same as Proxmox's `wwn=` drive option wants it: `0x5056432d49443031`. */
export function wwnForSlot(slot: number): string {
  return '0x' + wwnHexForSlot(slot);
}

const PVC_ID_HEX_RE = /^5056432d4944(?:3\d){2}$/i;

/** True for a disk this driver (or the one it replaces) attached: hex("PVC-ID") + two digits; `0x` optional. */
export function isPvcIdWwn(wwn: string | undefined): boolean {
  return wwn !== undefined && PVC_ID_HEX_RE.test(wwn.trim().replace(/^0x/i, ''));
}

/**
 * WWN of a short-lived attachment that exists only so Proxmox can resize an unattached volume
 * (offline expansion, see controller/rpc/expand.ts): the ASCII text `PVC-XP%02d`. It is never the
 * node's `PVC-ID%02d`, so no node plugin takes the disk for a volume, and it marks the attachment
 * in the VM config, so one left behind by a crash is recognised and removed by the next call.
 */
export function helperWwnForSlot(slot: number): string {
  return '0x' + Buffer.from(`PVC-XP${String(slot).padStart(2, '0')}`, 'ascii').toString('hex');
}

const HELPER_WWN_RE = /^0x5056432d5850(?:3\d){2}$/i;

export const isHelperWwn = (wwn: string | undefined): boolean => wwn !== undefined && HELPER_WWN_RE.test(wwn);
