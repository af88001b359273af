// ZFS pool (ZFSPoolPlugin.pm): zvols `<pool>/vm-<vmid>-<name>`, raw (subvol is for containers);
// alloc_image refuses a name not starting `vm-<vmid>-`; status() reports the pool dataset's
// used + available; free_image is `zfs destroy -r`, "dataset is busy" while a VM holds it.
import type { StorageKind } from './kind.js';

export const ZFSPOOL: StorageKind = {
  name: 'ZFS',
  types: ['zfspool'],
  formats: ['raw'],
  formatRule: 'a ZFS pool holds VM disks as zvols, raw only',
  fileBased: false,
  thin: true,
  alwaysShared: false,
  inUse: 'zfs destroy: dataset is busy',
  markers: false,
  snapshots: { supported: false, why: 'ZFS snapshots and clones are not implemented by this driver yet' },
};
