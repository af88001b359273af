// Snapshots, clones and disk reassignment of qemu VMs, with qemu-server's parameter checks,
// privileges and task types: POST/DELETE …/snapshot (snapshot, delsnapshot: qmsnapshot,
// qmdelsnapshot), POST …/clone (clone_vm: qmclone) and POST …/move_disk with target-vmid
// (move_vm_disk's reassign: qmmove). What runs in the workers is in sim/ops/vm-snapshot.ts and
// sim/ops/vm-clone.ts.

import { fail, paramError } from '../http/errors.js';
import { NODE, type ParamSpec, STORAGE, VMID } from '../http/params.js';
import type { Route, RouteCtx } from '../http/router.js';
import { parseVolid } from '../model/drive.js';
import type { VmModel } from '../model/types.js';
import { configDigest } from '../model/vmconfig.js';
import { getStorage, loadVm } from '../ops/context.js';
import {
  type CloneRequest,
  checkCloneFeatures,
  checkReassign,
  cloneSource,
  cloneVm,
  reassignDisk,
} from '../ops/vm-clone.js';
import { snapshotCreate, snapshotDelete, volumeDrives } from '../ops/vm-snapshot.js';
import { ALL_DRIVE_NAMES } from './qemu-params.js';

/** pve-snapshot-name (pve-common): a pve-configid of at most 40 characters. */
const SNAPNAME: ParamSpec = { type: 'string', format: 'pve-configid', maxLength: 40 };
const DISK_KEYS = [...ALL_DRIVE_NAMES, ...Array.from({ length: 256 }, (_, i) => `unused${i}`)];
const userOf = (rc: RouteCtx) => rc.user.split('!')[0];

function cloneRoute(): Route {
  return {
    method: 'POST',
    template: '/nodes/{node}/qemu/{vmid}/clone',
    schema: {
      properties: {
        node: NODE,
        vmid: VMID,
        newid: VMID,
        name: { type: 'string', optional: true, pattern: /[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?/ },
        description: { type: 'string', optional: true },
        pool: { type: 'string', optional: true },
        snapname: { ...SNAPNAME, optional: true },
        storage: { ...STORAGE, optional: true },
        format: { type: 'string', optional: true, enum: ['raw', 'qcow2', 'vmdk'] },
        full: { type: 'boolean', optional: true },
        target: { ...NODE, optional: true },
        bwlimit: { type: 'integer', optional: true, minimum: 0 },
      },
    },
    perm: (p, raw) => {
      p.check(`/vms/${raw.vmid}`, ['VM.Clone']);
      p.check(`/vms/${raw.newid}`, ['VM.Allocate']);
    },
    handler: (rc) => {
      const { sim, params, perms, user } = rc;
      const node = params.node ?? '';
      const vmid = Number(params.vmid);
      if (params.pool) throw fail('pools are not modelled by the simulator');
      if (params.target && params.target !== node)
        throw fail('cloning to another node is not modelled by the simulator');
      const vm = loadVm(sim, node, vmid);
      const lock = vm.config.get('lock');
      if (lock) throw fail(`VM is locked (${lock})`);
      const req: CloneRequest = {
        newid: Number(params.newid),
        snapname: params.snapname,
        full: params.full !== undefined ? params.full === '1' : vm.config.get('template') !== '1',
        storage: params.storage,
        name: params.name,
        description: params.description,
      };
      if (req.snapname !== undefined) cloneSource(vm, req.snapname);
      if (params.storage !== undefined && !req.full) throw fail("parameter 'storage' not allowed for linked clones");
      if (params.format !== undefined && !req.full) throw fail("parameter 'format' not allowed for linked clones");
      if (params.format !== undefined && params.format !== 'raw') throw fail('only raw images are modelled');
      if (req.storage) getStorage(sim, node, req.storage);
      // check_storage_access_clone: Datastore.AllocateSpace on every storage a drive uses (or the target)
      for (const { volid } of volumeDrives(cloneSource(vm, req.snapname))) {
        const sid = parseVolid(volid)?.storage;
        if (sid) perms.check(`/storage/${req.storage ?? sid}`, ['Datastore.AllocateSpace']);
      }
      checkCloneFeatures(sim, vm, req);
      if (vm.status === 'running' && req.full && req.snapname === undefined)
        throw fail('a full clone of a running VM (drive-mirror) is not modelled by the simulator');
      if (sim.state.vms.has(req.newid)) throw fail(`unable to create VM ${req.newid}: config file already exists`);
      const task = sim.tasks.start(node, 'qmclone', String(vmid), user, (log) => cloneVm(sim, vm, req, log));
      return task.upid;
    },
  };
}

function moveDiskRoute(): Route {
  return {
    method: 'POST',
    template: '/nodes/{node}/qemu/{vmid}/move_disk',
    schema: {
      properties: {
        node: NODE,
        vmid: VMID,
        'target-vmid': { ...VMID, optional: true },
        disk: { type: 'string', enum: DISK_KEYS },
        storage: { ...STORAGE, optional: true },
        format: { type: 'string', optional: true, enum: ['raw', 'qcow2', 'vmdk'] },
        delete: { type: 'boolean', optional: true },
        digest: { type: 'string', optional: true, maxLength: 40 },
        bwlimit: { type: 'integer', optional: true, minimum: 0 },
        'target-disk': { type: 'string', optional: true, enum: DISK_KEYS },
        'target-digest': { type: 'string', optional: true, maxLength: 40 },
      },
    },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Config.Disk']),
    handler: (rc) => {
      const { sim, params, perms, user } = rc;
      const node = params.node ?? '';
      const vmid = Number(params.vmid);
      const targetVmid = params['target-vmid'];
      if (targetVmid !== undefined && params.storage !== undefined) {
        const msg = "either set 'storage' or 'target-vmid', but not both";
        throw paramError({ 'target-vmid': msg, storage: msg });
      }
      if (targetVmid === undefined) {
        if (params.storage !== undefined)
          throw fail('moving a disk to another storage is not modelled by the simulator');
        throw paramError({
          'target-vmid': "either set 'storage' or 'target-vmid'",
          storage: "either set 'storage' or 'target-vmid'",
        });
      }
      if (userOf(rc) !== 'root@pam') perms.check(`/vms/${targetVmid}`, ['VM.Config.Disk']);
      if (String(vmid) === targetVmid)
        throw paramError({ 'target-vmid': 'must be different than source VMID to reassign disk' });
      const vm = sim.state.vms.get(vmid);
      const target = sim.state.vms.get(Number(targetVmid));
      if (!vm) throw fail(`could not find VM ${vmid}`);
      if (!target) throw fail(`could not find target VM ${targetVmid}`);
      loadVm(sim, node, vmid);
      if (params.digest) assertDigest(vm, params.digest, `VM ${vmid}: `);
      if (params['target-digest']) assertDigest(target, params['target-digest'], `VM ${targetVmid}: `);
      const req = { disk: params.disk ?? '', targetDisk: params['target-disk'] ?? params.disk ?? '' };
      const value = checkReassign(sim, vm, target, req);
      const file = /^unused\d+$/.test(req.disk) ? value : (value.split(',')[0] ?? '');
      const storage = parseVolid(file)?.storage ?? '';
      perms.check(`/storage/${storage}`, ['Datastore.AllocateSpace']);
      const id = `${vmid}-${req.disk}>${targetVmid}-${req.targetDisk}`;
      const task = sim.tasks.start(node, 'qmmove', id, user, (log) => reassignDisk(sim, vm, target, req, log));
      return task.upid;
    },
  };
}

/** PVE::Tools::assert_if_modified, as move_disk words it per VM. */
function assertDigest(vm: VmModel, digest: string, prefix: string): void {
  if (configDigest(vm) !== digest)
    throw fail(`${prefix}detected modified configuration - file changed by other user? Try again.`);
}

export const qemuSnapshotRoutes: Route[] = [
  {
    method: 'POST',
    template: '/nodes/{node}/qemu/{vmid}/snapshot',
    schema: {
      properties: {
        node: NODE,
        vmid: VMID,
        snapname: SNAPNAME,
        vmstate: { type: 'boolean', optional: true },
        description: { type: 'string', optional: true },
      },
    },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Snapshot']),
    handler: (rc) => {
      const { sim, params, user } = rc;
      const node = params.node ?? '';
      const vmid = Number(params.vmid);
      const name = params.snapname ?? '';
      if (name === 'current') throw fail("unable to use snapshot name 'current' (reserved name)");
      if (name.toLowerCase() === 'pending') throw fail("unable to use snapshot name 'pending' (reserved name)");
      const vm = loadVm(sim, node, vmid);
      if (params.vmstate === '1') throw fail('snapshots with the VM state are not modelled by the simulator');
      const task = sim.tasks.start(node, 'qmsnapshot', String(vmid), user, (log) =>
        snapshotCreate(sim, vm, name, params.description, log),
      );
      return task.upid;
    },
  },
  {
    method: 'DELETE',
    template: '/nodes/{node}/qemu/{vmid}/snapshot/{snapname}',
    schema: { properties: { node: NODE, vmid: VMID, snapname: SNAPNAME, force: { type: 'boolean', optional: true } } },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Snapshot']),
    handler: (rc) => {
      const { sim, params, user } = rc;
      const node = params.node ?? '';
      const vm = loadVm(sim, node, Number(params.vmid));
      const name = params.snapname ?? '';
      const task = sim.tasks.start(node, 'qmdelsnapshot', String(vm.vmid), user, (log) =>
        snapshotDelete(sim, vm, name, params.force === '1', log),
      );
      return task.upid;
    },
  },
  cloneRoute(),
  moveDiskRoute(),
];
