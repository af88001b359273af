// Snapshot sections and edits by hand: `[name]` sections of the config file (PVE::QemuServer
// write_vm_config), GET …/snapshot (qemu-server snapshot_list), GET …/config?snapshot=NAME
// (PVE::AbstractConfig load_snapshot_config), the cluster file's `pending:` and `snapshots:`,
// and the admin API's hand edits, which start no task.
import t from 'tap';
import { defaultConfig, startTestSim } from './fixtures/helpers.js';

const cfg = defaultConfig();
const node0 = (cfg.nodes as Array<{ vms: Array<Record<string, unknown>> }>)[0];
const vm111 = node0?.vms[1];
if (!vm111) throw new Error('the default cluster has no second VM on hyper1');
vm111.config = { parent: 'before' };
vm111.pending = { sata2: 'local-lvm:vm-111-disk-2,size=1G' };
vm111.snapshots = {
  before: {
    snaptime: '1700000000',
    scsi0: 'local-lvm:vm-111-disk-0,size=64G',
    virtio3: 'local-lvm:vm-111-disk-9,size=2G',
  },
};
const ts = await startTestSim({ config: cfg });
t.teardown(() => ts.close());
const { call, admin } = ts;
const VM = '/nodes/hyper1/qemu/111';

t.test('the cluster file creates the volumes pending and snapshot sections name', async (t) => {
  const vols = (await call('GET', '/nodes/hyper1/storage/local-lvm/content', { vmid: 111 })).body?.data as Array<{
    volid: string;
  }>;
  t.same(vols.map((v) => v.volid).sort(), [
    'local-lvm:vm-111-disk-0',
    'local-lvm:vm-111-disk-2',
    'local-lvm:vm-111-disk-9',
  ]);
});

t.test('GET …/snapshot lists the snapshots, then current with its parent', async (t) => {
  const list = (await call('GET', `${VM}/snapshot`)).body?.data as Array<Record<string, unknown>>;
  t.match(list, [
    { name: 'before', snaptime: 1700000000, vmstate: 0, description: '' },
    { name: 'current', parent: 'before', running: 1, description: 'You are here!' },
  ]);
});

t.test('GET …/config?snapshot=NAME answers the section with the file digest', async (t) => {
  const snap = (await call('GET', `${VM}/config`, { snapshot: 'before' })).body?.data as Record<string, unknown>;
  const cur = (await call('GET', `${VM}/config`)).body?.data as Record<string, unknown>;
  t.equal(snap.virtio3, 'local-lvm:vm-111-disk-9,size=2G');
  t.equal(snap.digest, cur.digest, 'the digest is the whole file’s');
  t.notOk('virtio3' in cur, 'a snapshot key is not a current key');
  const none = await call('GET', `${VM}/config`, { snapshot: 'nope' });
  t.equal(none.status, 500);
  t.match(none.text, /snapshot 'nope' does not exist/);
});

t.test('the digest covers the snapshot sections; hand edits start no task', async (t) => {
  const digest = async () => ((await call('GET', `${VM}/config`)).body?.data as { digest: string }).digest;
  const before = await digest();
  const tasks = async () =>
    ((await call('GET', '/nodes/hyper1/tasks', { source: 'all' })).body?.data as unknown[]).length;
  const n = await tasks();
  await admin.patchVm(111, { snapshots: { later: { scsi5: 'local-lvm:vm-111-disk-9,size=2G' } } });
  t.not(await digest(), before, 'a new section changes the digest');
  await admin.patchVm(111, { config: { virtio2: 'local-lvm:vm-111-disk-9,size=2G' }, snapshots: { later: null } });
  const cur = (await call('GET', `${VM}/config`)).body?.data as Record<string, unknown>;
  t.equal(cur.virtio2, 'local-lvm:vm-111-disk-9,size=2G');
  t.equal(await tasks(), n, 'no task');
  await admin.patchVm(111, { config: { virtio2: null } });
});

t.test('unlinking a volume a snapshot still uses keeps it (is_volume_in_use)', async (t) => {
  await admin.patchVm(111, { config: { unused0: 'local-lvm:vm-111-disk-9' } });
  const r = await call('PUT', `${VM}/config`, { delete: 'unused0' });
  t.not(r.status, 200, 'refused');
  t.match(r.text, /still in use \(snapshot\?\)/);
});
