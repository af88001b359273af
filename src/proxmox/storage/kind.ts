// What differs between the Proxmox storage plugins the driver serves, as one shape: each plugin
// kind has its own module (lvmthin.ts, lvm.ts, zfspool.ts, rbd.ts, file.ts), read from
// pve-storage's plugins (docs/storage-types.md says what was taken from where). Everything else
// of a volume's life (attach, WWN, ownership, fences) is the same on every storage.

/** Formats a CreateVolume may ask for (`storageFormat`); the first of a kind's list is its default. */
export const DISK_FORMATS = ['raw', 'qcow2'] as const;
export type DiskFormat = (typeof DISK_FORMATS)[number];

/** How the driver's CSI snapshots, restores and clones work on a storage, or why they do not. */
export type SnapshotSupport = { supported: true } | { supported: false; why: string };

export interface StorageKind {
  /** The kind's name in messages and docs. */
  readonly name: string;
  /** pve-storage plugin types (storage.cfg `type`, the resources' `plugintype`) it serves. */
  readonly types: readonly string[];
  /** Formats the plugin allocates (its plugindata `format`), default first. */
  readonly formats: readonly DiskFormat[];
  /** Why another format is refused: what the plugin allows, in a person's words. */
  readonly formatRule: string;
  /**
   * A file storage names a volume `<vmid>/<name>.<format>` (Plugin.pm alloc_image returns
   * "$vmid/$name"); a block storage names it `<name>` (an LV, a zvol, an RBD image).
   */
  readonly fileBased: boolean;
  /**
   * Space is taken as data is written (thin LVs, sparse zvols, RBD images, sparse files and
   * qcow2): over-commit is possible and the pool guard's over-commit limit means something.
   * Thick LVM takes the whole size at allocation: Proxmox itself refuses what does not fit.
   */
  readonly thin: boolean;
  /** Shared whatever storage.cfg says (PVE::Storage's list of shared plugin types). */
  readonly alwaysShared: boolean;
  /** What Proxmox answers when a volume is freed while a running VM holds it open. */
  readonly inUse: string;
  readonly snapshots: SnapshotSupport;
  /**
   * Whether a VolumeAttributesClass marker (an empty volume named `<disk>+vac…`, params/mutable.ts)
   * can exist here: ZFS dataset names take no `+`, and a file storage's names must end in the
   * format's extension.
   */
  readonly markers: boolean;
}

/** The volume name Proxmox stores for the disk `vm-<vmid>-<pv name>` in this format. */
export function volnameFor(kind: StorageKind, disk: string, vmid: number, format: DiskFormat): string {
  return kind.fileBased ? `${vmid}/${disk}.${format}` : disk;
}

/** The `filename` of the allocation call: the volume name without a file storage's `<vmid>/`. */
export const allocFilename = (volname: string): string => volname.replace(/^\d+\//, '');

/** The format a volume name says (a file storage's extension), raw for a block storage's name. */
export function formatOfVolname(volname: string): DiskFormat {
  return volname.endsWith('.qcow2') ? 'qcow2' : 'raw';
}
