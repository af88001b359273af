// Thick LVM (LVMPlugin.pm): LVs `vm-<vmid>-<name>` that take their whole size from the volume
// group at allocation ("not enough free space" otherwise); status() reports the VG's size and
// free extents. qcow2 on LVM exists only with `snapshot-as-volume-chain` (Proxmox VE 9), an
// option the driver's token cannot read (GET /storage/{id} needs Datastore.Allocate on it), so
// the driver allocates raw. Shared when storage.cfg says so (a VG on a SAN LUN).
import type { StorageKind } from './kind.js';

export const LVM: StorageKind = {
  name: 'LVM',
  types: ['lvm'],
  formats: ['raw'],
  formatRule:
    'thick LVM holds raw volumes here (qcow2 needs the storage option snapshot-as-volume-chain, which the driver does not use)',
  fileBased: false,
  thin: false,
  alwaysShared: false,
  inUse: 'lvremove: Logical volume … in use',
  markers: true,
  snapshots: {
    supported: false,
    why: 'thick LVM has no thin snapshots (Proxmox snapshots it only as a qcow2 volume chain)',
  },
};
