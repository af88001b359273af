// Which Proxmox privileges a subcommand needs (report, report --fix, move), and which of them the
// configured credentials lack (GET /access/permissions, as preflight reads it): the one table. The needs come from pve-manager/qemu-server/
// pve-storage's own permission checks on the calls each command makes:
//   GET /cluster/resources              lists only VMs with VM.Audit and storages with Datastore.Audit
//   GET …/qemu/{vmid}/pending           VM.Audit on /vms/{vmid}
//   GET …/storage/{storage}/content     Datastore.Audit or Datastore.AllocateSpace on the storage, and
//                                       then hides each image unless Datastore.Allocate on the storage,
//                                       or Datastore.Audit + VM.Config.Disk on /vms/{owner vmid}
//   DELETE …/storage/{storage}/content/{volume}   Datastore.Allocate on the storage
//   PUT …/qemu/{vmid}/unlink, POST …/config delete   VM.Config.Disk on /vms/{vmid}
//   POST …/qemu (create), DELETE …/qemu/{vmid}       VM.Allocate on /vms/{vmid}; a create that sets
//                                       `name` or `description` also VM.Config.Options there
//                                       ($check_vm_modify_config_perm, $generaloptions)
//   POST …/qemu/{vmid}/clone                          VM.Clone on /vms/{vmid}, VM.Allocate on
//                                       /vms/{newid}, Datastore.AllocateSpace on the storage
//   POST …/qemu/{vmid}/snapshot, DELETE …/snapshot/{name}   VM.Snapshot on /vms/{vmid}
//   POST …/qemu/{vmid}/migrate                       VM.Migrate on /vms/{vmid}
// The roles users create (and the pveum commands docs/proxmox-setup.md shows) are in
// src/proxmox/roles.ts; a unit test holds the needs below, the roles and the page to each other.
// Both listings filter silently: a token that cannot see every VM would make an attached disk
// look unattached. That is why report --fix refuses to act unless every need is met.
import { BASE_ROLE, MOVE_ROLE, SNAPSHOT_ROLE, type ProxmoxRole } from '../proxmox/index.js';

export interface Need {
  /** ACL path the privilege is checked on; the check also accepts any parent path. */
  path: string;
  privilege: string;
  why: string;
}

export type Permissions = Record<string, Record<string, number>>;

/**
 * Whether a privilege holds on a path, from GET /access/permissions: Proxmox lists every ACL path
 * (and the top-level ones) with the privileges fully resolved there, a deeper ACL replacing what
 * a parent grants (PVE::AccessControl::roles). So the deepest listed path decides: the path
 * itself counts whatever its propagate flag, a parent only where it propagates (1).
 */
export function hasPrivilege(perms: Permissions, path: string, privilege: string): boolean {
  const segs = path.split('/').filter(Boolean);
  for (let n = segs.length; n >= 0; n--) {
    const at = perms['/' + segs.slice(0, n).join('/')];
    if (!at || Object.keys(at).length === 0) continue;
    return n === segs.length ? privilege in at : at[privilege] === 1;
  }
  return false;
}

export function missingNeeds(perms: Permissions, needs: readonly Need[]): Need[] {
  return needs.filter((n) => !hasPrivilege(perms, n.path, n.privilege));
}

/** `report`: see every VM's config and the driver's disks on every storage. */
export function reportNeeds(controllerVmId: number): Need[] {
  return [
    {
      path: '/vms',
      privilege: 'VM.Audit',
      why: 'list every VM and read its config (a VM it cannot see would hide an attachment)',
    },
    { path: '/storage', privilege: 'Datastore.Audit', why: 'list the storages and the disks on them' },
    {
      path: `/vms/${controllerVmId}`,
      privilege: 'VM.Config.Disk',
      why: `see disks owned by VMID ${controllerVmId} in storage listings (or Datastore.Allocate on the storages)`,
    },
  ];
}

/** `report --fix`: also free disks and drop config entries. */
export function fixNeeds(controllerVmId: number, o: { helperVms?: boolean } = {}): Need[] {
  return [
    ...reportNeeds(controllerVmId),
    { path: '/storage', privilege: 'Datastore.Allocate', why: 'free orphaned disks' },
    { path: '/vms', privilege: 'VM.Config.Disk', why: 'remove unusedN entries and helper attachments from VM configs' },
    // Only where the driver has helper VMs of snapshots and clones (docs/snapshots.md).
    ...(o.helperVms
      ? [
          { path: '/vms', privilege: 'VM.Allocate', why: 'destroy leftover copy, snapshot and volume VMs' },
          { path: '/vms', privilege: 'VM.Snapshot', why: "delete a leftover copy VM's temporary snapshot" },
        ]
      : []),
  ];
}

/** Datastore.Allocate on a storage also shows every image, so VM.Config.Disk on the owner is then not needed. */
export function effectiveMissing(perms: Permissions, needs: readonly Need[], storages: readonly string[]): Need[] {
  return missingNeeds(perms, needs).filter((n) => {
    if (!(n.privilege === 'VM.Config.Disk' && n.path !== '/vms')) return true;
    return !(storages.length > 0 && storages.every((s) => hasPrivilege(perms, `/storage/${s}`, 'Datastore.Allocate')));
  });
}

/**
 * `move`: beyond reading, the mover VM's create/destroy (VM.Allocate; its name and description
 * VM.Config.Options), its migration (VM.Migrate), letting it hold and release the disk
 * (VM.Config.Disk), the copy on the target storage (Datastore.AllocateSpace) and freeing a
 * leftover source copy (Datastore.Allocate).
 */
export function moveNeeds(vmid: number, storage: string): Need[] {
  const vm = `/vms/${vmid}`;
  const st = `/storage/${storage}`;
  return [
    { path: vm, privilege: 'VM.Audit', why: 'find the helper VM and read VM configs' },
    { path: vm, privilege: 'VM.Allocate', why: 'create and destroy the helper VM' },
    { path: vm, privilege: 'VM.Config.Options', why: 'give the helper VM its name and description at creation' },
    { path: vm, privilege: 'VM.Migrate', why: 'migrate the helper VM with the disk' },
    { path: vm, privilege: 'VM.Config.Disk', why: 'let the helper VM hold and release the disk' },
    { path: st, privilege: 'Datastore.Audit', why: 'list the disks of the storage' },
    { path: st, privilege: 'Datastore.AllocateSpace', why: 'allocate the copy on the target host' },
    { path: st, privilege: 'Datastore.Allocate', why: 'free a source copy a failed cleanup left behind' },
  ];
}

/** What the credentials lack for `move` of a disk on `storage`, one line each as move and preflight print it. */
export function missingMovePrivileges(perms: Permissions, vmid: number, storage: string): string[] {
  return missingNeeds(perms, moveNeeds(vmid, storage)).map((n) => `${n.privilege} on ${n.path} (${n.why})`);
}

/**
 * Snapshots, restores and clones (docs/snapshots.md, "Proxmox: design"): beyond the CSI role,
 * the helper VMs' create and destroy (VM.Allocate), the name and description that mark a copy
 * VM as ours, set at its creation (VM.Config.Options), the copy VM's snapshot (VM.Snapshot) and
 * its linked clone (VM.Clone, and Datastore.AllocateSpace on the storage), the volume VM's
 * offline migration of a restore into another zone (VM.Migrate), and holding a disk of
 * the controller VMID on a helper VM (VM.Config.Disk there and Datastore.Audit). All on /vms
 * and /storage: the helper VMIDs are chosen per operation.
 */
export function snapshotNeeds(controllerVmId: number): Need[] {
  return [
    { path: '/vms', privilege: 'VM.Audit', why: 'find the helper VMs and read their configs' },
    { path: '/vms', privilege: 'VM.Allocate', why: 'create and destroy the copy, snapshot and volume VMs' },
    {
      path: '/vms',
      privilege: 'VM.Config.Options',
      why: 'create the copy VM with the name and description that mark it as ours',
    },
    { path: '/vms', privilege: 'VM.Snapshot', why: 'snapshot the copy VM that holds only the source disk' },
    { path: '/vms', privilege: 'VM.Clone', why: 'make the linked clone from that snapshot' },
    {
      path: '/vms',
      privilege: 'VM.Migrate',
      why: 'migrate a volume VM with its clone to the requested host (a restore or clone into another zone)',
    },
    { path: '/vms', privilege: 'VM.Config.Disk', why: 'let the copy VM hold the source disk' },
    {
      path: `/vms/${controllerVmId}`,
      privilege: 'VM.Config.Disk',
      why: `attach disks owned by VMID ${controllerVmId} to the copy VM`,
    },
    { path: '/storage', privilege: 'Datastore.Audit', why: 'read the disks of the storage' },
    { path: '/storage', privilege: 'Datastore.AllocateSpace', why: 'allocate the linked clone' },
    { path: '/storage', privilege: 'Datastore.Allocate', why: 'free a restored volume' },
  ];
}

/** The privileges a token needs for snapshots, as a Proxmox role lists them (tests, docs). */
export const SNAPSHOT_PRIVILEGES = [...new Set(snapshotNeeds(0).map((n) => n.privilege))];

export interface SetupOptions {
  /** Proxmox user the token belongs to. */
  user?: string;
  /** Token id (the part after `!`). */
  token?: string;
  /** The config's controllerVmID (`move`'s role is granted on that VMID only). */
  controllerVmId?: number;
}

const roleCommand = (r: ProxmoxRole) => `pveum role add ${r.id} --privs ${r.privileges.join(',')}`;

/**
 * ACL lines granting roles on a role's paths, to the user and its privilege-separated token (such
 * a token has at most its user's privileges, and only its own ACLs).
 */
function aclCommands(
  roles: readonly ProxmoxRole[],
  paths: readonly string[],
  user: string,
  tokenId: string,
  vmid: number,
) {
  const ids = roles.map((r) => r.id).join(',');
  return paths.map(
    (p) => `pveum acl modify ${p.replace('{vmid}', String(vmid))} --roles ${ids} --users ${user} --tokens '${tokenId}'`,
  );
}

/**
 * The Proxmox side as pveum commands (docs/proxmox-setup.md shows exactly these lines): the
 * base role, user and privilege-separated token, then what snapshots and `move` add.
 */
export function proxmoxSetupCommands(o: SetupOptions = {}): { base: string[]; snapshots: string[]; move: string[] } {
  const user = o.user ?? 'kubernetes-csi@pve';
  const tokenId = `${user}!${o.token ?? 'csi'}`;
  const vmid = o.controllerVmId ?? 9999;
  return {
    base: [
      roleCommand(BASE_ROLE),
      `pveum user add ${user} --comment 'pve-nfs-csi driver'`,
      `pveum user token add ${user} ${o.token ?? 'csi'} --privsep 1 --comment 'pve-nfs-csi driver'`,
      ...aclCommands([BASE_ROLE], BASE_ROLE.paths, user, tokenId, vmid),
    ],
    snapshots: [roleCommand(SNAPSHOT_ROLE), ...aclCommands([SNAPSHOT_ROLE], SNAPSHOT_ROLE.paths, user, tokenId, vmid)],
    // An ACL on /vms/<vmid> replaces there what /vms grants, so it names the base role too.
    move: [roleCommand(MOVE_ROLE), ...aclCommands([BASE_ROLE, MOVE_ROLE], MOVE_ROLE.paths, user, tokenId, vmid)],
  };
}
