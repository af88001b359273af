// Read-only cluster views: /version, /cluster/resources, /nodes, /nodes/{node}/qemu and
// …/status/current. Lists are filtered by privilege instead of refused, like PVE does.

import { parseDrive } from '../model/drive.js';
import type { NodeModel, StorageModel, VmModel } from '../model/types.js';
import { storageUsage } from '../ops/storage.js';
import { type SimContext, loadVm } from '../ops/context.js';
import { NODE, VMID } from '../http/params.js';
import type { Route } from '../http/router.js';
import { defined } from '../defined.js';

const MIB = 1024 * 1024;

function vmNumbers(vm: VmModel, nowSec: number) {
  const cores = Number(vm.config.get('cores') ?? 1) * Number(vm.config.get('sockets') ?? 1);
  const maxmem = Number.parseInt(vm.config.get('memory') ?? '512', 10) * MIB;
  let maxdisk = 0;
  const boot = vm.config.get('scsi0');
  if (boot) {
    try {
      maxdisk = Number(parseDrive('scsi0', boot).opts.size ?? 0);
    } catch {
      maxdisk = 0;
    }
  }
  const running = vm.status === 'running';
  return {
    cpus: cores,
    maxmem,
    maxdisk,
    mem: running ? Math.floor(maxmem * 0.42) : 0,
    cpu: running ? 0.0123 : 0,
    disk: 0,
    diskread: running ? 123_456_789 : 0,
    diskwrite: running ? 98_765_432 : 0,
    netin: running ? 1_234_567 : 0,
    netout: running ? 765_432 : 0,
    uptime: running ? Math.max(0, nowSec - vm.startedAt) : 0,
  };
}

function vmResource(vm: VmModel, nowSec: number, lagMs: number) {
  const n = vmNumbers(vm, nowSec);
  // pmxcfs' VM list (and the API's short cache) trails a migration: the old node for a while
  const node = vm.movedFrom && Date.now() - vm.movedFrom.atMs < lagMs ? vm.movedFrom.node : vm.node;
  return {
    id: `qemu/${vm.vmid}`,
    type: 'qemu',
    vmid: vm.vmid,
    name: vm.config.get('name') ?? `VM ${vm.vmid}`,
    node,
    status: vm.status,
    template: 0,
    maxcpu: n.cpus,
    maxmem: n.maxmem,
    maxdisk: n.maxdisk,
    cpu: n.cpu,
    mem: n.mem,
    disk: n.disk,
    diskread: n.diskread,
    diskwrite: n.diskwrite,
    netin: n.netin,
    netout: n.netout,
    uptime: n.uptime,
  };
}

function nodeEntry(node: NodeModel, withStats: boolean, sim: SimContext) {
  const base: Record<string, unknown> = {
    id: `node/${node.name}`,
    type: 'node',
    node: node.name,
    status: node.online ? 'online' : 'offline',
    level: '',
  };
  if (!withStats) return base;
  return {
    ...base,
    'cgroup-mode': 2,
    maxcpu: node.maxcpu,
    maxmem: node.maxmem,
    cpu: 0.0421,
    mem: Math.floor(node.maxmem * 0.31),
    maxdisk: 100 * 1024 ** 3,
    disk: 7 * 1024 ** 3,
    uptime: Math.floor(process.uptime()) + 86_400,
    ssl_fingerprint: sim.state.name,
  };
}

async function storageResource(sim: SimContext, st: StorageModel, node: string) {
  const u = await storageUsage(sim, st);
  return {
    id: `storage/${node}/${st.id}`,
    type: 'storage',
    storage: st.id,
    node,
    status: 'available',
    plugintype: st.type,
    content: st.content,
    shared: st.shared ? 1 : 0,
    disk: u.used,
    maxdisk: u.total,
  };
}

export const clusterRoutes: Route[] = [
  {
    method: 'GET',
    template: '/version',
    schema: { properties: {} },
    handler: ({ sim }) => ({ ...sim.state.version }),
  },
  {
    method: 'GET',
    template: '/cluster/resources',
    schema: { properties: { type: { type: 'string', optional: true, enum: ['vm', 'storage', 'node', 'sdn'] } } },
    handler: async ({ sim, params, perms }) => {
      const type = params.type;
      const res: unknown[] = [];
      if (!type || type === 'vm') {
        if (perms.has('VM.Audit')) {
          for (const vm of [...sim.state.vms.values()].sort((a, b) => a.vmid - b.vmid))
            res.push(vmResource(vm, sim.nowSec(), sim.faults.get().resourcesLagMs));
        }
      }
      if (!type || type === 'node') {
        for (const node of sim.state.nodes.values()) res.push(nodeEntry(node, perms.has('Sys.Audit'), sim));
      }
      if (!type || type === 'storage') {
        if (perms.has('Datastore.Audit') || perms.has('Datastore.AllocateSpace')) {
          for (const node of sim.state.nodes.values()) {
            for (const st of node.storages.values()) res.push(await storageResource(sim, st, node.name));
          }
        }
      }
      return res;
    },
  },
  {
    method: 'GET',
    template: '/nodes',
    schema: { properties: {} },
    handler: ({ sim, perms }) => [...sim.state.nodes.values()].map((n) => nodeEntry(n, perms.has('Sys.Audit'), sim)),
  },
  {
    method: 'GET',
    template: '/nodes/{node}/qemu',
    schema: { properties: { node: NODE, full: { type: 'boolean', optional: true } } },
    handler: ({ sim, params, perms }) => {
      if (!perms.has('VM.Audit')) return [];
      return [...sim.state.vms.values()]
        .filter((vm) => vm.node === params.node)
        .sort((a, b) => a.vmid - b.vmid)
        .map((vm) => {
          const n = vmNumbers(vm, sim.nowSec());
          const item: Record<string, unknown> = {
            vmid: vm.vmid,
            name: vm.config.get('name'),
            status: vm.status,
            ...n,
          };
          if (vm.status === 'running') item.pid = vm.pid;
          const lock = vm.config.get('lock');
          if (lock) item.lock = lock;
          return item;
        });
    },
  },
  {
    method: 'GET',
    template: '/nodes/{node}/qemu/{vmid}/status/current',
    schema: { properties: { node: NODE, vmid: VMID } },
    perm: (p, raw) => p.check(`/vms/${raw.vmid}`, ['VM.Audit']),
    handler: ({ sim, params }) => {
      const vm = loadVm(sim, defined(params.node, 'node'), Number(params.vmid));
      const n = vmNumbers(vm, sim.nowSec());
      const out: Record<string, unknown> = {
        vmid: vm.vmid,
        name: vm.config.get('name'),
        status: vm.status,
        qmpstatus: vm.status === 'running' ? 'running' : 'stopped',
        ...n,
        ha: { managed: 0 },
        agent: 0,
      };
      if (vm.status === 'running') {
        out.pid = vm.pid;
        out['running-qemu'] = '9.0.2';
        out['running-machine'] = 'pc-i440fx-9.0+pve0';
      }
      const lock = vm.config.get('lock');
      if (lock) out.lock = lock;
      return out;
    },
  },
];
