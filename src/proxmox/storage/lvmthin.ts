// LVM-thin (LvmThinPlugin.pm): thin LVs `vm-<vmid>-<name>` in a thin pool, raw only
// (plugindata format raw; alloc_image dies "unsupported format"); status() reports the pool's
// size and data usage; free_image removes the volume's `snap_<name>_*` thin snapshots with it.
import type { StorageKind } from './kind.js';

export const LVMTHIN: StorageKind = {
  name: 'LVM-thin',
  types: ['lvmthin'],
  formats: ['raw'],
  formatRule: 'LVM-thin holds raw volumes only',
  fileBased: false,
  thin: true,
  alwaysShared: false,
  inUse: 'lvremove: Logical volume … in use',
  markers: true,
  snapshots: { supported: true },
};
