// Storage endpoints: allocate, list, info, free (task), status, and their error paths.

import t from 'tap';
import { defaultConfig, startTestSim } from './fixtures/helpers.js';

const cfg = defaultConfig();
// hyper3's pool refuses over-provisioning so capacity errors can be tested
const hyper3Pool = (
  cfg.nodes.find((n) => n.name === 'hyper3')?.storages as Array<Record<string, unknown>> | undefined
)?.[0];
if (!hyper3Pool) throw new Error('the default cluster has no storage on hyper3');
hyper3Pool.overcommit = false;
const ts = await startTestSim({ config: cfg, faults: { lockTimeoutMs: 300 } });
t.teardown(() => ts.close());
const { call, waitTask } = ts;
const CONTENT = '/nodes/hyper1/storage/local-lvm/content';

t.test('allocate, list, info, free', async (t) => {
  const r = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-pvc-one', size: '10G' });
  t.same(r.body, { data: 'local-lvm:vm-9999-pvc-one' });
  const kib = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-pvc-kib', size: '1025' });
  t.equal(kib.status, 200);
  const list = (await call('GET', CONTENT, { vmid: 9999 })).body?.data as Array<Record<string, unknown>>;
  t.same(
    list.map((v) => [v.volid, v.size, v.vmid, v.format]),
    [
      ['local-lvm:vm-9999-pvc-kib', 4 * 1024 ** 2, 9999, 'raw'],
      ['local-lvm:vm-9999-pvc-one', 10 * 1024 ** 3, 9999, 'raw'],
    ],
    'sizes are whole 4 MiB extents',
  );
  const all = (await call('GET', CONTENT)).body?.data as unknown[];
  t.equal(all.length, 4, 'boot disks of the two VMs plus the new volumes');
  const other = (await call('GET', '/nodes/hyper2/storage/local-lvm/content', { vmid: 9999 })).body?.data;
  t.same(other, [], 'local-lvm is per host');
  const info = await call('GET', `${CONTENT}/local-lvm:vm-9999-pvc-one`);
  t.same(info.body?.data, { path: '/dev/pve/vm-9999-pvc-one', size: 10 * 1024 ** 3, used: 0, format: 'raw' });
  const del = await call('DELETE', `${CONTENT}/local-lvm:vm-9999-pvc-one`);
  const upid = del.body?.data as string;
  t.match(upid, /^UPID:hyper1:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:imgdel:9999@local-lvm:kubernetes-csi@pve!csi:$/);
  const st = await waitTask('hyper1', upid);
  t.match(st, {
    status: 'stopped',
    exitstatus: 'OK',
    type: 'imgdel',
    id: '9999@local-lvm',
    user: 'kubernetes-csi@pve',
    tokenid: 'csi',
    node: 'hyper1',
  });
  const log = await call('GET', `/nodes/hyper1/tasks/${encodeURIComponent(upid)}/log`);
  t.same(log.body?.data, [
    { n: 1, t: '  Logical volume "vm-9999-pvc-one" successfully removed.' },
    { n: 2, t: "Removed volume 'local-lvm:vm-9999-pvc-one'" },
    { n: 3, t: 'TASK OK' },
  ]);
  t.equal(log.body?.total, 3);
  const gone = await call('GET', `${CONTENT}/vm-9999-pvc-one`);
  t.equal(gone.status, 500);
  t.equal(gone.statusText, "volume_size_info on 'local-lvm:vm-9999-pvc-one' failed - no format");
  const again = await call('DELETE', `${CONTENT}/vm-9999-pvc-one`, { delay: 5 });
  t.same(
    again.body,
    { data: null },
    'freeing a missing thin LV succeeds (lvmthin free_image skips it); delay waits for the task',
  );
});

t.test('allocation errors', async (t) => {
  await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-pvc-dup', size: '1G' });
  const dup = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-pvc-dup', size: '1G' });
  t.equal(dup.status, 500);
  t.equal(
    dup.body?.message,
    'lvcreate \'pve/vm-9999-pvc-dup\' error:   Logical Volume "vm-9999-pvc-dup" already exists in volume group "pve"\n',
  );
  const name = await call('POST', CONTENT, { vmid: 9999, filename: 'pvc-x', size: '1G' });
  t.equal(name.statusText, "illegal name 'pvc-x' - should be 'vm-9999-*'");
  const owner = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-101-x', size: '1G' });
  t.equal(owner.statusText, "illegal name 'vm-101-x' - should be 'vm-9999-*'");
  const fmt = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-q', size: '1G', format: 'qcow2' });
  t.equal(fmt.status, 500);
  t.match(fmt.statusText, /^unsupported format 'qcow2' at /);
  const fmt2 = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-q.qcow2', size: '1G', format: 'raw' });
  t.same(fmt2.body?.errors, { format: 'different storage formats (raw != qcow2)' });
  const size = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-s', size: '10Gi' });
  t.equal(size.status, 400);
  t.same(size.body?.errors, { size: 'value does not match the regex pattern' });
  const missing = await call('POST', CONTENT, { vmid: 9999, size: '1G' });
  t.same(missing.body?.errors, { filename: 'property is missing and it is not optional' });
  const vmid = await call('POST', CONTENT, { vmid: 5, filename: 'vm-5-x', size: '1G' });
  t.same(vmid.body?.errors, { vmid: 'value must have a minimum value of 100' });
  const store = await call('POST', '/nodes/hyper1/storage/nas/content', {
    vmid: 9999,
    filename: 'vm-9999-x',
    size: '1G',
  });
  t.equal(store.statusText, "storage 'nas' does not exist");
  const full = await call('POST', '/nodes/hyper3/storage/local-lvm/content', {
    vmid: 9999,
    filename: 'vm-9999-big',
    size: '500G',
  });
  t.equal(full.status, 500);
  t.match(full.statusText, /Cannot create new thin volume, free space in thin pool pve\/data reached threshold/);
  const thin = await call('POST', '/nodes/hyper2/storage/local-lvm/content', {
    vmid: 9999,
    filename: 'vm-9999-big',
    size: '500G',
  });
  t.equal(thin.status, 200, 'thin pools over-provision by default');
});

t.test('delete errors: parse, storage mismatch, volume in use by a running VM', async (t) => {
  const bad = await call('DELETE', `${CONTENT}/notavolume`);
  t.equal(bad.statusText, "unable to parse lvm volume name 'notavolume'");
  const mismatch = await call('DELETE', `${CONTENT}/other:vm-9999-x`);
  t.equal(mismatch.status, 400);
  t.same(mismatch.body?.errors, { volume: 'storage ID mismatch (other != local-lvm)\n' });
  const boot = await call('DELETE', `${CONTENT}/local-lvm:vm-101-disk-0`);
  const st = await waitTask('hyper1', boot.body?.data as string);
  t.equal(st.exitstatus, "lvremove 'pve/vm-101-disk-0' error:   Logical volume pve/vm-101-disk-0 in use.");
  const still = await call('GET', `${CONTENT}/vm-101-disk-0`);
  t.equal(still.status, 200);
  const delayed = await call('DELETE', `${CONTENT}/local-lvm:vm-101-disk-0`, { delay: 5 });
  t.equal(delayed.status, 500, 'with delay a failed task becomes the error of the call');
  t.match(delayed.statusText, /in use\.$/);
});

t.test('status reports thin pool usage', async (t) => {
  const r = await call('GET', '/nodes/hyper1/storage/local-lvm/status');
  t.match(r.body?.data, {
    type: 'lvmthin',
    active: 1,
    enabled: 1,
    shared: 0,
    total: 200 * 1024 ** 3,
    used: 24 * 1024 ** 3,
    content: 'images,rootdir',
  });
  const d = r.body?.data as { avail: number; total: number; used: number };
  t.equal(d.avail, d.total - d.used);
  const none = await call('GET', '/nodes/hyper1/storage/zfs/status');
  t.equal(none.statusText, "storage 'zfs' does not exist");
});

t.test('storage lock: a second allocator waits, then times out with the flock message', async (t) => {
  await ts.admin.holdLock({ node: 'hyper1', storage: 'local-lvm' }, 600);
  const started = Date.now();
  const r = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-locked', size: '1G' });
  t.equal(r.status, 500);
  t.equal(r.statusText, "can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout");
  t.ok(Date.now() - started >= 280, 'waited for the lock timeout');
  const other = await call('POST', '/nodes/hyper2/storage/local-lvm/content', {
    vmid: 9999,
    filename: 'vm-9999-other',
    size: '1G',
  });
  t.equal(other.status, 200, 'another host has its own lock');
  await new Promise((r) => setTimeout(r, 400));
  const later = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-locked', size: '1G' });
  t.equal(later.status, 200, 'works once the holder is gone');
});

t.test('concurrent allocations of one name: exactly one wins', async (t) => {
  const results = await Promise.all(
    Array.from({ length: 5 }, () => call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-race', size: '1G' })),
  );
  t.equal(results.filter((r) => r.status === 200).length, 1);
  t.equal(results.filter((r) => /already exists/.test(r.statusText)).length, 4);
});

t.test('parse_lvm_name: a name LVM takes but pve-storage cannot parse is listed nowhere and answers 500', async (t) => {
  // LVM accepts '+', so the allocation succeeds (LvmThinPlugin alloc_image checks only vm-<vmid>-)
  const made = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-pvc-m+vac1-b1', size: '4M' });
  t.same(made.body, { data: 'local-lvm:vm-9999-pvc-m+vac1-b1' });
  // the content listing runs check_volume_access on each volume and skips the ones that die
  const list = (await call('GET', CONTENT, { vmid: 9999 })).body?.data as Array<{ volid: string }>;
  t.notOk(
    list.some((v) => v.volid.includes('+')),
    'left out of the listing',
  );
  const illegal = "lvm name 'vm-9999-pvc-m+vac1-b1' contains illegal characters";
  const info = await call('GET', `${CONTENT}/local-lvm:vm-9999-pvc-m+vac1-b1`);
  t.equal(info.status, 500);
  t.equal(info.statusText, illegal);
  const del = await call('DELETE', `${CONTENT}/local-lvm:vm-9999-pvc-m+vac1-b1`);
  t.equal(del.status, 500);
  t.equal(del.statusText, illegal);
  // the same name in a VM config: $check_storage_access parses it too
  const cfgSet = await call('POST', '/nodes/hyper1/qemu/101/config', { unused5: 'local-lvm:vm-9999-pvc-m+vac1-b1' });
  t.equal(cfgSet.statusText, illegal);
  // '_' is one of parse_lvm_name's characters: such a name is listed, read and freed
  const ok = await call('POST', CONTENT, { vmid: 9999, filename: 'vm-9999-pvc-m_vac2-b1', size: '4M' });
  t.equal(ok.status, 200);
  const listed = (await call('GET', CONTENT, { vmid: 9999 })).body?.data as Array<{ volid: string }>;
  t.ok(listed.some((v) => v.volid === 'local-lvm:vm-9999-pvc-m_vac2-b1'));
  t.equal((await call('GET', `${CONTENT}/local-lvm:vm-9999-pvc-m_vac2-b1`)).status, 200);
  const freed = await call('DELETE', `${CONTENT}/local-lvm:vm-9999-pvc-m_vac2-b1`);
  t.equal((await waitTask('hyper1', freed.body?.data as string)).exitstatus, 'OK');
});
