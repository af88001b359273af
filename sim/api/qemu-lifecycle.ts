// POST /nodes/{node}/qemu (create_vm), DELETE /nodes/{node}/qemu/{vmid} (destroy_vm) and
// POST /nodes/{node}/qemu/{vmid}/migrate (migrate_vm, offline), with qemu-server's parameter
// checks, privileges and task types (qmcreate, qmdestroy, qmigrate).

import type { Perms } from '../http/auth.js';
import { fail, paramError, permError } from '../http/errors.js';
import { NODE, VMID, splitList } from '../http/params.js';
import type { Route, RouteCtx } from '../http/router.js';
import { isDriveKey, parseVolid } from '../model/drive.js';
import { getNode, getStorage, loadVm, withVmLock } from '../ops/context.js';
import { type StorageMap, mapStorage, migrateOffline, referencedVolumes } from '../ops/migrate.js';
import { createLockedVm, destroyEarlyChecks, destroyVm, finishCreate } from '../ops/vm-lifecycle.js';
import { checkModifyConfigPerm, checkOption, checkStorageAccess } from './qemu-params.js';
import { volnameParser } from './storage.js';

const STORAGE_ID_RE = /^[a-z][a-z0-9\-_.]*[a-z0-9]$/i;

/** The user behind a token (`root@pam!x` → `root@pam`): root-only options check the user. */
const userOf = (rc: RouteCtx) => rc.user.split('!')[0];

/** PVE::JSONSchema::parse_idmap for pve-storage-id maps. */
export function parseStorageMap(value: string): StorageMap {
  if (value === '1') return { identity: true, entries: {} };
  const map: StorageMap = { identity: false, entries: {} };
  for (const entry of splitList(value)) {
    const [src = '', dst, extra] = entry.split(':');
    if (extra !== undefined) throw new Error(`entry '${entry}' contains multiple ':'`);
    if (dst === undefined) {
      if (map.default !== undefined) throw new Error('default target ID can only be provided once');
      if (!STORAGE_ID_RE.test(src)) throw new Error(`invalid target ID: ${src}`);
      map.default = src;
      continue;
    }
    if (!STORAGE_ID_RE.test(src) || !STORAGE_ID_RE.test(dst)) throw new Error(`invalid ID in entry '${entry}'`);
    if (map.entries[src] !== undefined) throw new Error(`duplicate source ID '${src}'`);
    map.entries[src] = dst;
  }
  return map;
}

/** check_storage_access_migrate: the target storage exists on the node, takes images, may be used. */
function checkStorageAccessMigrate(rc: RouteCtx, perms: Perms, storage: string, node: string): void {
  getStorage(rc.sim, node, storage);
  perms.check(`/storage/${storage}`, ['Datastore.AllocateSpace']);
}

const CREATE_OPTIONS = new Set([
  'name',
  'description',
  'memory',
  'cores',
  'sockets',
  'scsihw',
  'ostype',
  'onboot',
  'tags',
]);

export const qemuLifecycleRoutes: Route[] = [
  {
    method: 'POST',
    template: '/nodes/{node}/qemu',
    schema: {
      properties: {
        node: NODE,
        vmid: VMID,
        pool: { type: 'string', optional: true },
        start: { type: 'boolean', optional: true },
      },
      extra: (key, value) => {
        if (!CREATE_OPTIONS.has(key) && !/^unused\d+$/.test(key)) {
          return isDriveKey(key)
            ? 'allocating or attaching disks at create is not modelled by the simulator'
            : 'property is not defined in schema and the schema does not allow additional properties';
        }
        return /^unused\d+$/.test(key) ? undefined : checkOption(key, value);
      },
    },
    handler: (rc) => {
      const { sim, params, perms, user } = rc;
      const node = params.node ?? '';
      const vmid = Number(params.vmid);
      getNode(sim, node);
      if (params.pool) throw fail('pools are not modelled by the simulator');
      if (params.start === '1') throw fail('starting VMs is not modelled by the simulator');
      // create_vm: VM.Allocate on the VM (or its pool; raise_perm_exc without a path), then
      // $check_storage_access for the volumes it names and $check_vm_modify_config_perm for
      // every key (name and description: VM.Config.Options)
      if (!perms.has('VM.Allocate')) throw permError();
      const settings = new Map<string, string>();
      for (const [k, v] of Object.entries(params)) if (k !== 'node' && k !== 'vmid') settings.set(k, v);
      checkStorageAccess(perms, vmid, settings, volnameParser(sim, node));
      checkModifyConfigPerm(perms, vmid, settings.keys());
      const vm = createLockedVm(sim, node, vmid);
      const task = sim.tasks.start(node, 'qmcreate', String(vmid), user, () => {
        finishCreate(sim, vm, settings);
        return Promise.resolve();
      });
      return task.upid;
    },
  },
  {
    method: 'DELETE',
    template: '/nodes/{node}/qemu/{vmid}',
    schema: {
      properties: {
        node: NODE,
        vmid: VMID,
        skiplock: { type: 'boolean', optional: true },
        purge: { type: 'boolean', optional: true },
        'destroy-unreferenced-disks': { type: 'boolean', optional: true },
      },
    },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Allocate']),
    handler: (rc) => {
      const { sim, params, user } = rc;
      if (params.skiplock === '1' && userOf(rc) !== 'root@pam')
        throw paramError({ skiplock: 'Only root may use this option.' });
      const node = params.node ?? '';
      const vmid = Number(params.vmid);
      destroyEarlyChecks(sim, node, vmid);
      const task = sim.tasks.start(node, 'qmdestroy', String(vmid), user, async (log) => {
        const vm = destroyEarlyChecks(sim, node, vmid);
        await withVmLock(sim, vm, () => destroyVm(sim, vm, params['destroy-unreferenced-disks'] === '1', log));
      });
      return task.upid;
    },
  },
  {
    method: 'POST',
    template: '/nodes/{node}/qemu/{vmid}/migrate',
    schema: {
      properties: {
        node: NODE,
        vmid: VMID,
        target: NODE,
        online: { type: 'boolean', optional: true },
        force: { type: 'boolean', optional: true },
        migration_type: { type: 'string', optional: true, enum: ['secure', 'insecure'] },
        migration_network: { type: 'string', optional: true },
        'with-local-disks': { type: 'boolean', optional: true },
        targetstorage: { type: 'string', optional: true },
        bwlimit: { type: 'integer', optional: true, minimum: 0 },
        'with-conntrack-state': { type: 'boolean', optional: true },
      },
    },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Migrate']),
    handler: (rc) => {
      const { sim, params, perms, user } = rc;
      const node = params.node ?? '';
      const target = params.target ?? '';
      const vmid = Number(params.vmid);
      getNode(sim, node);
      if (target === node) throw paramError({ target: 'target is local node.' });
      if (!sim.state.nodes.has(target)) throw fail(`no such cluster node '${target}'`);
      for (const opt of ['force', 'migration_type', 'migration_network'] as const) {
        if (params[opt] !== undefined && params[opt] !== '0' && userOf(rc) !== 'root@pam') {
          throw paramError({ [opt]: 'Only root may use this option.' });
        }
      }
      const vm = loadVm(sim, node, vmid);
      const lock = vm.config.get('lock');
      if (lock) throw fail(`VM is locked (${lock})`);
      const online = params.online === '1';
      if (vm.status === 'running' && !online) throw fail("can't migrate running VM without --online");
      let storagemap: StorageMap | undefined;
      if (params.targetstorage) {
        try {
          storagemap = parseStorageMap(params.targetstorage);
        } catch (e) {
          throw paramError({ targetstorage: `failed to parse storage map: ${(e as Error).message}` });
        }
        if (!storagemap.identity) perms.check(`/vms/${vmid}`, ['VM.Config.Disk']);
        for (const sid of Object.values(storagemap.entries)) checkStorageAccessMigrate(rc, perms, sid, target);
        if (storagemap.default) checkStorageAccessMigrate(rc, perms, storagemap.default, target);
      }
      if (!storagemap || storagemap.identity) {
        // check_storage_availability: every referenced storage must exist on the target node
        for (const volid of referencedVolumes(vm).keys()) {
          const sid = parseVolid(volid)?.storage;
          if (sid) getStorage(sim, target, mapStorage(storagemap, sid));
        }
      }
      const task = sim.tasks.start(node, 'qmigrate', String(vmid), user, (log) =>
        migrateOffline(sim, { node, vmid, target, online, ...(storagemap ? { storagemap } : {}) }, log),
      );
      return task.upid;
    },
  },
];
