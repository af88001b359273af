// The admin endpoint: request log, per-route counters, state dump, VM status, reset.

import t from 'tap';
import { fetch } from 'undici';
import { startTestSim } from './fixtures/helpers.js';

const ts = await startTestSim();
t.teardown(() => ts.close());
const { call, admin, sim } = ts;

t.test('counters per route template and the request log', async (t) => {
  await admin.resetCounters();
  await call('GET', '/nodes/hyper1/qemu/101/config');
  await call('GET', '/nodes/hyper2/qemu/102/config');
  await call('POST', '/nodes/hyper1/storage/local-lvm/content', { vmid: 9999, filename: 'vm-9999-pvc-a', size: '1G' });
  await call('GET', '/nodes/hyper1/qemu/101/nothing');
  const c = await admin.counters();
  t.equal(c.total, 4);
  t.same(c.byRoute, {
    'GET /nodes/{node}/qemu/{vmid}/config': 2,
    'POST /nodes/{node}/storage/{storage}/content': 1,
    'GET (unmatched)': 1,
  });
  t.same(c.errorsByRoute, { 'GET (unmatched)': 1 });
  const log = await admin.requests();
  t.equal(log.entries.length, 4);
  t.match(log.entries[2], {
    method: 'POST',
    path: '/api2/json/nodes/hyper1/storage/local-lvm/content',
    status: 200,
    route: 'POST /nodes/{node}/storage/{storage}/content',
    tokenId: 'kubernetes-csi@pve!csi',
    params: { vmid: '9999', filename: 'vm-9999-pvc-a', size: '1G' },
  });
  const since = await admin.requests(log.entries[1]?.seq);
  t.equal(since.entries.length, 2, 'since= returns only newer entries');
});

t.test('state dump, VM status changes and lock property', async (t) => {
  await call('PUT', '/nodes/hyper1/qemu/101/config', { scsi1: 'local-lvm:vm-9999-pvc-a' });
  const state = (await admin.state()) as {
    vms: Array<{ vmid: number; config: Record<string, string>; status: string }>;
    nodes: Array<{ name: string; storages: Array<{ volumes: Array<{ volid: string }> }> }>;
  };
  t.equal(state.vms.find((v) => v.vmid === 101)?.config.scsi1, 'local-lvm:vm-9999-pvc-a,size=1G');
  t.ok(state.nodes[0]?.storages[0]?.volumes.some((v) => v.volid === 'local-lvm:vm-9999-pvc-a'));
  t.match(await admin.patchVm(101, { status: 'stopped', lock: 'backup' }), { status: 'stopped', lock: 'backup' });
  const st = (await call('GET', '/nodes/hyper1/qemu/101/status/current')).body?.data as Record<string, unknown>;
  t.match(st, { status: 'stopped', lock: 'backup' });
  await admin.patchVm(101, { status: 'running', lock: null });
  await t.rejects(admin.patchVm(999, { status: 'running' }), /404 VM 999 does not exist/);
  await t.rejects(admin.patchVm(101, { status: 'paused' as never }), /400 status: running or stopped/);
  const r = await fetch(`${sim.adminUrl}/nope`);
  t.equal(r.status, 404);
  await r.body?.cancel();
});

t.test('the state dump lists the locks held at this moment', async (t) => {
  const locksOf = async () => ((await admin.state()) as { locks: string[] }).locks;
  t.same(await locksOf(), [], 'nothing held while idle');
  await admin.holdLock({ vmid: 111 }, 300);
  await admin.holdLock({ node: 'hyper2', storage: 'local-lvm' }, 300);
  t.same(await locksOf(), [
    'hyper1:/var/lock/qemu-server/lock-111.conf',
    'hyper2:/var/lock/pve-manager/pve-storage-local-lvm',
  ]);
  await new Promise((r) => setTimeout(r, 400));
  t.same(await locksOf(), [], 'released after holdMs');
});

t.test('reset restores the initial cluster and clears logs', async (t) => {
  await admin.patchFaults({ latencyMs: 5 });
  await admin.reset();
  const cfg = (await call('GET', '/nodes/hyper1/qemu/101/config')).body?.data as Record<string, unknown>;
  t.notOk('scsi1' in cfg);
  const vols = (await call('GET', '/nodes/hyper1/storage/local-lvm/content', { vmid: 9999 })).body?.data;
  t.same(vols, []);
  t.equal((await admin.faults()).latencyMs, 0, 'faults back to the start values');
  t.equal((await admin.counters()).total, 2, 'counters restart after reset: only the two calls above');
});
