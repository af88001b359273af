// Node id → VM: by name, by provider id, by SMBIOS uuid; cached, shared, refreshed on a miss.
import t from 'tap';
import { pino } from 'pino';
import { isCsiError, NotFound } from '../../../../../src/errors.js';
import { toCsiError } from '../../../../../src/proxmox/api/errors.js';
import { VmLocator } from '../../../../../src/proxmox/controller/state/vm-locator.js';
import { seedCluster } from '../../api/fake-api.js';

const W1 = { vmid: 102, node: 'hyper1', name: 'talos-worker-1' };
const W2 = { vmid: 104, node: 'hyper2', name: 'talos-worker-2' };
const CP2 = { vmid: 103, node: 'hyper2', name: 'talos-cp-2' };
const W7 = { vmid: 210, node: 'hyper3', name: 'talos-w-7.lan.example' };
const UUID_103 = '00000000-0000-4000-8000-000000000103';

/** Node id → the VM it names (undefined: none), and why. */
const byId: [id: string, vm: typeof W1 | undefined, why: string][] = [
  ['talos-worker-1', W1, 'by name'],
  ['proxmox://homelab/105', { vmid: 105, node: 'hyper3', name: 'talos-cp-3' }, 'provider id'],
  ['proxmox:///104', W2, 'empty region in a provider id'],
  ['proxmox://other/105', undefined, 'provider id of another region'],
  [UUID_103, CP2, 'SMBIOS uuid'],
  [UUID_103.toUpperCase(), CP2, 'uuid case-insensitive'],
  ['fake-node-id-123', undefined, 'unknown'],
  // upstream's node plugin, NodeGetInfo with `i=<vmid>` in the SMBIOS serial: `<node name>/<vmid>`; the VMID decides
  ['talos-worker-1/102', W1, '<node name>/<vmid>'],
  ['k8s-node-name-differs/104', W2, 'as upstream, the VMID wins over the name'],
  ['talos-worker-1/999', undefined, 'a VMID not in this cluster'],
  ['talos-worker-1/x', undefined, 'not a VMID'],
  // without `i=`: the bare node name, exact or as the first label of the VM name
  ['talos-w-7', W7, 'VM named <node>.<domain>'],
  ['talos-w', undefined, 'a bare prefix is not a label'],
];

t.test("by name, provider id, uuid: every node id form upstream's node plugin registers", async (t) => {
  const f = seedCluster();
  f.addVm({ vmid: W7.vmid, name: W7.name, node: W7.node });
  const loc = new VmLocator(f, { cluster: 'homelab' });
  for (const [id, vm, why] of byId) t.same(await loc.resolve(id), vm, `${id}: ${why}`);
});

t.test('cache: shared, short-lived, refreshed on a miss', async (t) => {
  const f = seedCluster();
  let now = 0;
  const loc = new VmLocator(f, { cluster: 'homelab', ttlMs: 1000, now: () => now });
  await Promise.all(Array.from({ length: 20 }, () => loc.resolve('talos-cp-1')));
  t.equal(f.count('vmResources'), 1, 'concurrent lookups share one list call');
  await loc.resolve('talos-cp-2');
  t.equal(f.count('vmResources'), 1, 'cached within the TTL');
  f.addVm({ vmid: 200, name: 'talos-worker-9', node: 'hyper2' });
  t.same(
    await loc.resolve('talos-worker-9'),
    { vmid: 200, node: 'hyper2', name: 'talos-worker-9' },
    'a new VM is found at once',
  );
  t.equal(f.count('vmResources'), 2, 'the miss re-read the list once');
  f.vmOf(101).node = 'hyper2';
  t.equal((await loc.resolve('talos-cp-1'))?.node, 'hyper1', 'stale within the TTL');
  t.equal((await loc.byVmid(101))?.node, 'hyper2', 'byVmid reads fresh (after a config read found the VM gone)');
  now = 5000;
  await loc.resolve('talos-cp-2');
  t.equal(f.count('vmResources'), 4, 'expired after the TTL');
});

t.test('templates and duplicates', async (t) => {
  const f = seedCluster();
  f.addVm({ vmid: 300, name: 'talos-tpl', node: 'hyper1', template: true });
  f.addVm({ vmid: 301, name: 'twin', node: 'hyper1' });
  f.addVm({ vmid: 302, name: 'twin', node: 'hyper2' });
  const loc = new VmLocator(f, { cluster: 'homelab' });
  t.equal(await loc.resolve('talos-tpl'), undefined, 'templates are not nodes');
  try {
    await loc.resolve('twin');
    t.fail('expected an error');
  } catch (e) {
    t.ok(isCsiError(e, 'FailedPrecondition'));
    t.match((e as Error).message, /301 on hyper1, 302 on hyper2/, 'names both VMs');
  }
});

t.test('a uuid scan that cannot read a VM config says why, instead of "no such VM"', async (t) => {
  const f = seedCluster();
  const read = f.vmConfig.bind(f);
  // The token lacks VM.Audit on VM 103: Proxmox's 403, through the real error mapping.
  f.vmConfig = async (node, vmid, o) => {
    if (vmid === 103) {
      throw toCsiError(
        new Error(
          `GET /api2/json/nodes/${node}/qemu/103/config return Error 403 Permission check failed (/vms/103, VM.Audit)`,
        ),
        {
          cluster: 'homelab',
          what: `read config of VM 103 on ${node}`,
          tokenId: 'kubernetes-csi@pve!csi',
        },
      );
    }
    return read(node, vmid, o);
  };
  const warned: Array<Record<string, unknown>> = [];
  const log = pino(
    { level: 'warn' },
    { write: (l: string) => void warned.push(JSON.parse(l) as Record<string, unknown>) },
  );
  const loc = new VmLocator(f, { cluster: 'homelab', log });
  const err: unknown = await loc.resolve('00000000-0000-4000-8000-000000000103').catch((e: unknown) => e);
  t.ok(isCsiError(err, 'FailedPrecondition'), 'the 403 decides the code, not a miss');
  t.match(
    (err as Error).message,
    /no readable VM .* config of 1 VM\(s\) could not be read \(103 on hyper2\): .*permission denied.*VM\.Audit/,
  );
  t.equal(warned.length, 1, 'logged once');
  t.match(warned[0], { vmid: 103, node: 'hyper2', msg: /cannot read a VM config/ });
  t.same(
    await loc.resolve('00000000-0000-4000-8000-000000000104'),
    { vmid: 104, node: 'hyper2', name: 'talos-worker-2' },
    'a readable VM is still found',
  );

  // A VM deleted between the list and the read is no error: the uuid is simply nobody's.
  const g = seedCluster();
  const readG = g.vmConfig.bind(g);
  g.vmConfig = async (node, vmid, o) => {
    if (vmid === 101)
      throw new NotFound(
        `Proxmox homelab: read config of VM 101 on ${node}: Configuration file 'nodes/${node}/qemu-server/101.conf' does not exist`,
      );
    return readG(node, vmid, o);
  };
  t.equal(await new VmLocator(g, { cluster: 'homelab' }).resolve('00000000-0000-4000-8000-000000000999'), undefined);
});

t.test('a caller that gives up does not cancel the shared VM list for the others', async (t) => {
  const f = seedCluster();
  f.latencyMs = 30;
  const loc = new VmLocator(f, { cluster: 'homelab' });
  const ac = new AbortController();
  const leaving = loc.resolve('talos-cp-1', ac.signal);
  const staying = loc.resolve('talos-cp-2', new AbortController().signal);
  setTimeout(() => {
    ac.abort(new Error('call cancelled by client'));
  }, 5);
  const e: unknown = await leaving.catch((x: unknown) => x);
  t.ok(isCsiError(e, 'DeadlineExceeded'), 'the caller that left gets DeadlineExceeded at once');
  t.same(await staying, CP2, 'the other caller still gets its answer');
  t.equal(f.count('vmResources'), 1, 'from the one shared list call');
});
