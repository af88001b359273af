// A VM created a moment ago is listed in /cluster/resources without its name, or as `VM <vmid>`,
// until pvestatd's next pass. The gate takes the name from the VM's config, read now, and still
// requires the driver's exact record: the listing's name makes no VM ours, and refuses none that is.
import t from 'tap';
import type { ConfigEntry, ProxmoxReadApi, VmResource } from '../../../../../src/proxmox/api/api.js';
import { copyStepProblem, formatRecord } from '../../../../../src/proxmox/controller/safety/copy-vms.js';
import { readFreshOf } from '../../../../../src/proxmox/controller/safety/fresh-read.js';

const VMID = 871_214_660;
const record = (controller: number) =>
  formatRecord({ role: 'copy', controller, name: 'snap-a', source: 's', created: 1 });

async function destroyProblem(listedName: string, config: Record<string, string>) {
  const vm: VmResource = { type: 'qemu', vmid: VMID, name: listedName, node: 'hyper1', status: 'unknown' };
  const entries: ConfigEntry[] = Object.entries(config).map(([key, value]) => ({ key, value }));
  const api = {
    vmResources: () => Promise.resolve([vm]),
    vmPending: () => Promise.resolve(entries),
    vmSnapshots: () => Promise.resolve([]),
    vmSnapshotConfig: () => Promise.resolve({}),
  } as unknown as ProxmoxReadApi;
  const host = await readFreshOf(api, ['hyper1']);
  const view = { host, vmids: new Set([VMID]), controllerVmId: 9999 };
  return copyStepProblem({ op: 'destroy', node: 'hyper1', vmid: VMID }, view)?.message;
}

t.test('a helper VM listed without a name is judged by its config and record', async (t) => {
  const ours = { name: 'pve-nfs-csi-copy', description: record(9999) };
  t.equal(await destroyProblem('', ours), undefined, 'its config names it and holds our record: ours');
  t.match(
    await destroyProblem('', { name: 'pve-nfs-csi-copy' }),
    /is not a copy\/snapshot\/volume VM of this driver/,
    'our name without our record: refused',
  );
  t.match(
    await destroyProblem('', { name: 'pve-nfs-csi-copy', description: record(1234) }),
    /is not a copy\/snapshot\/volume VM/,
    'another controller’s record: refused',
  );
  t.match(
    await destroyProblem('', { description: record(9999) }),
    /is not a copy\/snapshot\/volume VM/,
    'our record without our name: refused (never by VMID or record alone)',
  );
  t.equal(
    await destroyProblem(`VM ${String(VMID)}`, ours),
    undefined,
    'listed as `VM <vmid>` (a status pass read the config before its name was written): ours',
  );
  t.match(
    await destroyProblem('pve-nfs-csi-copy', { description: record(9999) }),
    /VM VM \d+ \(\d+\) is not a copy\/snapshot\/volume VM/,
    'a stale listed name of ours does not count when the config has none',
  );
});
