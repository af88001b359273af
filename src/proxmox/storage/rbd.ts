// Ceph RBD (RBDPlugin.pm): images `vm-<vmid>-<name>` in a pool, raw only, always shared (every
// host of the cluster reaches the pool); status() reports the pool's stored and available
// bytes; free_image fails "image still has watchers" while a VM has it open.
import type { StorageKind } from './kind.js';

export const RBD: StorageKind = {
  name: 'Ceph RBD',
  types: ['rbd'],
  formats: ['raw'],
  formatRule: 'Ceph RBD holds raw images only',
  fileBased: false,
  thin: true,
  alwaysShared: true,
  inUse: 'rbd rm: image still has watchers',
  markers: true,
  snapshots: { supported: false, why: 'RBD snapshots and clones are not implemented by this driver yet' },
};
