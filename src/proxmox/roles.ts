// The Proxmox roles the driver's token is given (docs/proxmox-setup.md prints them as pveum
// commands; preflight, the error texts and the test tiers use the same lists). Read from
// Proxmox VE 9's permission checks (qemu-server PVE/API2/Qemu.pm, pve-storage
// PVE/API2/Storage/Content.pm and PVE/Storage.pm check_volume_access):
//   - the base role serves CSI: VM.Audit (configs, /cluster/resources), VM.Config.Disk (drive
//     lines), Datastore.* (allocate, list, free);
//   - snapshots, restores and clones create a copy VM with `name` and `description`: create_vm
//     checks VM.Allocate and, through $check_vm_modify_config_perm, VM.Config.Options for those
//     two keys; the copy VM's snapshot is VM.Snapshot, its linked clone VM.Clone (clone_vm checks
//     no option privilege for the clone's name), a restore into another zone migrates
//     (VM.Migrate);
//   - `pve-nfs-csi move` creates its mover VM the same way (VM.Allocate, VM.Config.Options) and
//     migrates it (VM.Migrate).

export interface ProxmoxRole {
  /** Role id for `pveum role add` (Proxmox reserves ids starting with PVE). */
  id: string;
  privileges: readonly string[];
  /** The ACL paths the role is granted on; `{vmid}` stands for the controller VMID. */
  paths: readonly string[];
}

/** What serving CSI needs (ControllerPublish/Unpublish, Create/Delete/Expand/Modify volume). */
export const BASE_ROLE: ProxmoxRole = {
  id: 'CSI',
  privileges: ['VM.Audit', 'VM.Config.Disk', 'Datastore.Allocate', 'Datastore.AllocateSpace', 'Datastore.Audit'],
  paths: ['/vms', '/storage'],
};

/** What snapshots, restores and clones add, on every VMID (the helper VMIDs vary per operation). */
export const SNAPSHOT_ROLE: ProxmoxRole = {
  id: 'CSISnapshots',
  privileges: ['VM.Allocate', 'VM.Config.Options', 'VM.Snapshot', 'VM.Clone', 'VM.Migrate'],
  paths: ['/vms'],
};

/** What `pve-nfs-csi move` adds, on the controller VMID only (its mover VM has that VMID). */
export const MOVE_ROLE: ProxmoxRole = {
  id: 'CSIMove',
  privileges: ['VM.Allocate', 'VM.Config.Options', 'VM.Migrate'],
  paths: ['/vms/{vmid}'],
};

/** The base role's privileges as one line (error texts, preflight). */
export const CSI_ROLE_PRIVILEGES = BASE_ROLE.privileges.join(' ');
