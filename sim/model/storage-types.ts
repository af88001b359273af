// What pve-storage says about each plugin type the simulator models, as plain data: which are
// shared by their type (PVE::Storage's shared list), the default content of a new storage of
// that type (each plugin's plugindata `content` default), the formats it allocates (plugindata
// `format`) and the volume name pattern of its parse_volname.
import type { StorageType } from './types.js';

/** Types PVE::Storage marks shared whatever storage.cfg says. */
export const ALWAYS_SHARED: ReadonlySet<StorageType> = new Set(['rbd', 'nfs', 'cifs']);

/** File storages: images are files `images/<vmid>/<name>.<fmt>` (Plugin.pm). */
export const FILE_TYPES: ReadonlySet<StorageType> = new Set(['dir', 'nfs', 'cifs']);

/** plugindata `format` (the first is the default), for the allocations the simulator serves. */
export const FORMATS: Record<StorageType, readonly string[]> = {
  lvmthin: ['raw'],
  // qcow2 needs `snapshot-as-volume-chain`, which the simulator does not model
  lvm: ['raw'],
  zfspool: ['raw'],
  rbd: ['raw'],
  dir: ['raw', 'qcow2', 'vmdk'],
  nfs: ['raw', 'qcow2', 'vmdk'],
  cifs: ['raw', 'qcow2', 'vmdk'],
};

/** plugindata `content` default of a new storage of the type. */
export function defaultContent(t: StorageType): string {
  return t === 'lvmthin' || t === 'zfspool' ? 'images,rootdir' : 'images';
}

/** The place a storage keeps its volumes: VG, pool dataset, RBD pool or directory. */
export function defaultPlace(t: StorageType): string {
  switch (t) {
    case 'lvmthin':
    case 'lvm':
      return 'pve';
    case 'zfspool':
      return 'rpool/data';
    case 'rbd':
      return 'rbd';
    case 'dir':
      return '/var/lib/vz';
    case 'nfs':
    case 'cifs':
      return `/mnt/pve/${t}`;
  }
}
