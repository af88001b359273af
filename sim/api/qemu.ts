// /nodes/{node}/qemu/{vmid}/…: config (GET, sync PUT, async POST), pending, unlink, resize.

import { fail, paramError } from '../http/errors.js';
import { NODE, type RouteSchema, VMID } from '../http/params.js';
import type { Route, RouteCtx } from '../http/router.js';
import { configView, pendingView, snapshotList, snapshotView } from '../model/vmconfig.js';
import { loadVm, withVmLock } from '../ops/context.js';
import { resizeLocked } from '../ops/resize.js';
import { NO_LOG, checkDigestAndLock, updateVmLocked } from '../ops/vm-update.js';
import { defined } from '../defined.js';
import { statusIsError } from '../tasks.js';
import { ALL_DRIVE_NAMES, buildUpdateRequest, checkOption, checkUpdatePerms } from './qemu-params.js';
import { volnameParser } from './storage.js';

const VM_CONFIG_PERMS = [
  'VM.Config.Disk',
  'VM.Config.CDROM',
  'VM.Config.CPU',
  'VM.Config.Memory',
  'VM.Config.Network',
  'VM.Config.HWType',
  'VM.Config.Options',
  'VM.Config.Cloudinit',
];

const updateSchema = (async: boolean): RouteSchema => ({
  properties: {
    node: NODE,
    vmid: VMID,
    skiplock: { type: 'boolean', optional: true },
    delete: { type: 'string', optional: true, format: 'pve-configid-list' },
    revert: { type: 'string', optional: true, format: 'pve-configid-list' },
    force: { type: 'boolean', optional: true },
    digest: { type: 'string', optional: true, maxLength: 40 },
    ...(async ? { background_delay: { type: 'integer' as const, optional: true, minimum: 1, maximum: 30 } } : {}),
  },
  extra: checkOption,
});

function prepareUpdate(rc: RouteCtx, params: Record<string, string>) {
  if (params.force !== undefined && params.delete === undefined) {
    throw paramError({ force: "missing property - 'delete' is required by 'force'" });
  }
  const vmid = Number(params.vmid);
  const req = buildUpdateRequest(params);
  checkUpdatePerms(rc.perms, vmid, req, volnameParser(rc.sim, defined(params.node, 'node')));
  const vm = loadVm(rc.sim, defined(params.node, 'node'), vmid);
  checkDigestAndLock(vm, req.digest, req.skiplock);
  return { vm, req };
}

async function syncUpdate(rc: RouteCtx, params: Record<string, string>): Promise<null> {
  const { vm, req } = prepareUpdate(rc, params);
  await withVmLock(rc.sim, vm, () => updateVmLocked(rc.sim, vm, req, NO_LOG));
  return null;
}

export const qemuRoutes: Route[] = [
  {
    method: 'GET',
    template: '/nodes/{node}/qemu/{vmid}/config',
    schema: {
      properties: {
        node: NODE,
        vmid: VMID,
        current: { type: 'boolean', optional: true },
        snapshot: { type: 'string', optional: true, pattern: /[a-zA-Z][a-zA-Z0-9_-]+/, maxLength: 40 },
      },
    },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Audit']),
    handler: ({ sim, params }) => {
      const vm = loadVm(sim, defined(params.node, 'node'), Number(params.vmid));
      if (params.snapshot) {
        if (params.current === '1') {
          throw fail("cannot use 'snapshot' parameter with 'current'");
        }
        if (!vm.snapshots.has(params.snapshot)) throw fail(`snapshot '${params.snapshot}' does not exist`);
        return snapshotView(vm, params.snapshot);
      }
      return configView(vm, params.current === '1');
    },
  },
  {
    method: 'GET',
    template: '/nodes/{node}/qemu/{vmid}/snapshot',
    schema: { properties: { node: NODE, vmid: VMID } },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Audit']),
    handler: ({ sim, params }) => snapshotList(loadVm(sim, defined(params.node, 'node'), Number(params.vmid))),
  },
  {
    method: 'GET',
    template: '/nodes/{node}/qemu/{vmid}/pending',
    schema: { properties: { node: NODE, vmid: VMID } },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Audit']),
    handler: ({ sim, params }) => pendingView(loadVm(sim, defined(params.node, 'node'), Number(params.vmid))),
  },
  {
    method: 'PUT',
    template: '/nodes/{node}/qemu/{vmid}/config',
    schema: updateSchema(false),
    perm: (p, raw) => p.checkAny(`/vms/${raw.vmid}`, VM_CONFIG_PERMS),
    handler: (rc) => syncUpdate(rc, rc.params),
  },
  {
    method: 'POST',
    template: '/nodes/{node}/qemu/{vmid}/config',
    schema: updateSchema(true),
    perm: (p, raw) => p.checkAny(`/vms/${raw.vmid}`, VM_CONFIG_PERMS),
    handler: async (rc) => {
      const { sim, params, user } = rc;
      const { vm, req } = prepareUpdate(rc, params);
      const task = sim.tasks.start(vm.node, 'qmconfig', String(vm.vmid), user, (log) =>
        withVmLock(sim, vm, () => updateVmLocked(sim, vm, req, log)),
      );
      if (params.background_delay) {
        const exitstatus = await sim.tasks.waitFor(task, Number(params.background_delay) * 1000);
        if (exitstatus !== undefined) {
          if (!statusIsError(exitstatus)) return null;
          throw fail(`failed to update VM ${vm.vmid}: ${exitstatus}`);
        }
      }
      return task.upid;
    },
  },
  {
    method: 'PUT',
    template: '/nodes/{node}/qemu/{vmid}/unlink',
    schema: {
      properties: {
        node: NODE,
        vmid: VMID,
        idlist: { type: 'string', format: 'pve-configid-list' },
        force: { type: 'boolean', optional: true },
      },
    },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Config.Disk']),
    handler: (rc) => {
      const { idlist, ...rest } = rc.params;
      return syncUpdate(rc, { ...rest, delete: defined(idlist, 'idlist') });
    },
  },
  {
    method: 'PUT',
    template: '/nodes/{node}/qemu/{vmid}/resize',
    schema: {
      properties: {
        node: NODE,
        vmid: VMID,
        skiplock: { type: 'boolean', optional: true },
        disk: { type: 'string', enum: ALL_DRIVE_NAMES },
        size: { type: 'string', pattern: /\+?\d+(\.\d+)?[KMGT]?/ },
        digest: { type: 'string', optional: true, maxLength: 40 },
      },
    },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Config.Disk']),
    handler: ({ sim, params, perms, user }) => {
      if (params.skiplock === '1') throw paramError({ skiplock: 'Only root may use this option.' });
      const vmid = Number(params.vmid);
      const node = defined(params.node, 'node');
      const task = sim.tasks.start(node, 'resize', String(vmid), user, async () => {
        // qemu-server checks nothing before forking, so even a missing VM fails inside the task
        const vm = loadVm(sim, node, vmid);
        await withVmLock(sim, vm, () =>
          resizeLocked(sim, vm, {
            disk: defined(params.disk, 'disk'),
            size: defined(params.size, 'size'),
            skiplock: false,
            ...(params.digest ? { digest: params.digest } : {}),
            checkPriv: (path, priv) => perms.check(path, [priv]),
          }),
        );
      });
      return task.upid;
    },
  },
];
