// The Proxmox privileges `move` needs, checked against GET /access/permissions (also by preflight).

/**
 * Privileges move needs beyond reading: the helper VM's create/destroy (VM.Allocate), its
 * migration (VM.Migrate), letting it hold and release the disk (VM.Config.Disk), the copy on the
 * target storage (Datastore.AllocateSpace) and freeing a leftover source copy (Datastore.Allocate).
 */
export const MOVE_PRIVILEGES: Array<{ priv: string; path: (vmid: number, storage: string) => string; why: string }> = [
  { priv: 'VM.Audit', path: (v) => `/vms/${v}`, why: 'find the helper VM and read VM configs' },
  { priv: 'VM.Allocate', path: (v) => `/vms/${v}`, why: 'create and destroy the helper VM' },
  { priv: 'VM.Migrate', path: (v) => `/vms/${v}`, why: 'migrate the helper VM with the disk' },
  { priv: 'VM.Config.Disk', path: (v) => `/vms/${v}`, why: 'let the helper VM hold and release the disk' },
  { priv: 'Datastore.Audit', path: (_v, s) => `/storage/${s}`, why: 'list the disks of the storage' },
  { priv: 'Datastore.AllocateSpace', path: (_v, s) => `/storage/${s}`, why: 'allocate the copy on the target host' },
  {
    priv: 'Datastore.Allocate',
    path: (_v, s) => `/storage/${s}`,
    why: 'free a source copy a failed cleanup left behind',
  },
];

/** Privileges from GET /access/permissions, propagated from `/`, `/vms` or `/storage` as PVE does. */
export function missingMovePrivileges(
  perms: Record<string, Record<string, number>>,
  vmid: number,
  storage: string,
): string[] {
  const parentsOf = (p: string) => {
    const parts = p.split('/').filter(Boolean);
    return ['/', ...parts.map((_, i) => `/${parts.slice(0, i + 1).join('/')}`)];
  };
  return MOVE_PRIVILEGES.filter(({ priv, path }) => !parentsOf(path(vmid, storage)).some((p) => perms[p]?.[priv])).map(
    ({ priv, path, why }) => `${priv} on ${path(vmid, storage)} (${why})`,
  );
}
