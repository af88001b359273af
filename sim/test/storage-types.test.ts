// Every storage type the simulator models (sim/ops/plugins.ts): names, formats, rounding, the
// space each takes, the error texts of each plugin, shared storages seen from every node.

import t from 'tap';
import { defaultConfig, startTestSim } from './fixtures/helpers.js';

const cfg = defaultConfig();
const storages = (node: string) => cfg.nodes.find((n) => n.name === node)?.storages as Record<string, unknown>[];
for (const node of ['hyper1', 'hyper2']) {
  storages(node).push(
    { id: 'thick', type: 'lvm', vgname: 'san', size: '20G' },
    { id: 'local-zfs', type: 'zfspool', vgname: 'rpool/data', size: '20G' },
    { id: 'ceph', type: 'rbd', vgname: 'rbd', size: '100G' },
    { id: 'local', type: 'dir', vgname: '/var/lib/vz', size: '50G' },
    { id: 'nas', type: 'nfs', vgname: '/mnt/pve/nas', size: '50G' },
  );
}
const ts = await startTestSim({ config: cfg });
t.teardown(() => ts.close());
const { call, waitTask } = ts;
const content = (node: string, storage: string) => `/nodes/${node}/storage/${storage}/content`;
const GiB = 1024 ** 3;

t.test('block storages: raw names as given, sizes rounded as each plugin does', async (t) => {
  for (const [storage, size, want] of [
    ['thick', '1025', 4 * 1024 ** 2],
    ['local-zfs', '1025', 1040 * 1024],
    ['ceph', '1025', 2 * 1024 ** 2],
  ] as const) {
    const r = await call('POST', content('hyper1', storage), { vmid: 9999, filename: 'vm-9999-pvc-a', size });
    t.same(r.body, { data: `${storage}:vm-9999-pvc-a` }, storage);
    const list = (await call('GET', content('hyper1', storage), { vmid: 9999 })).body?.data as Record<
      string,
      unknown
    >[];
    t.same(
      list.map((v) => [v.volid, v.size, v.format]),
      [[`${storage}:vm-9999-pvc-a`, want, 'raw']],
    );
    const q = await call('POST', content('hyper1', storage), {
      vmid: 9999,
      filename: 'vm-9999-pvc-b',
      size: '1G',
      format: 'qcow2',
    });
    t.equal(q.status, 500, `${storage} refuses qcow2`);
    t.match(q.statusText, storage === 'thick' ? /snapshot-as-volume-chain/ : /unsupported format 'qcow2'/);
  }
  const dup = await call('POST', content('hyper1', 'local-zfs'), { vmid: 9999, filename: 'vm-9999-pvc-a', size: '1G' });
  t.equal(dup.statusText, "zfs error: cannot create 'rpool/data/vm-9999-pvc-a': dataset already exists");
  const rdup = await call('POST', content('hyper1', 'ceph'), { vmid: 9999, filename: 'vm-9999-pvc-a', size: '1G' });
  t.match(rdup.statusText, /\(17\) File exists/);
  const bad = await call('POST', content('hyper1', 'local-zfs'), { vmid: 9999, filename: 'vm-101-x', size: '1G' });
  t.equal(bad.statusText, "illegal name 'vm-101-x' - should be 'vm-9999-*'");
});

t.test('thick LVM and ZFS take the size at allocation; thin kinds do not', async (t) => {
  const before = (await call('GET', '/nodes/hyper2/storage/thick/status')).body?.data as { used: number };
  await call('POST', content('hyper2', 'thick'), { vmid: 9999, filename: 'vm-9999-pvc-t', size: '4G' });
  const after = (await call('GET', '/nodes/hyper2/storage/thick/status')).body?.data as { used: number };
  t.equal(after.used - before.used, 4 * GiB);
  const full = await call('POST', content('hyper2', 'thick'), { vmid: 9999, filename: 'vm-9999-pvc-u', size: '17G' });
  t.match(full.statusText, /^not enough free space \(\d+ < \d+\)$/);
  const zfull = await call('POST', content('hyper2', 'local-zfs'), {
    vmid: 9999,
    filename: 'vm-9999-pvc-u',
    size: '21G',
  });
  t.equal(zfull.statusText, "zfs error: cannot create 'rpool/data/vm-9999-pvc-u': out of space");
  const c0 = (await call('GET', '/nodes/hyper2/storage/ceph/status')).body?.data as { used: number };
  await call('POST', content('hyper2', 'ceph'), { vmid: 9999, filename: 'vm-9999-pvc-r', size: '4G' });
  const c1 = (await call('GET', '/nodes/hyper2/storage/ceph/status')).body?.data as { used: number };
  t.equal(c1.used, c0.used, 'an RBD image takes space as it is written');
});

t.test('file storages: <vmid>/<name>.<fmt>, raw and qcow2, extension must match', async (t) => {
  const r = await call('POST', content('hyper1', 'local'), { vmid: 9999, filename: 'vm-9999-pvc-f.qcow2', size: '1G' });
  t.same(r.body, { data: 'local:9999/vm-9999-pvc-f.qcow2' });
  const raw = await call('POST', content('hyper1', 'local'), {
    vmid: 9999,
    filename: 'vm-9999-pvc-g.raw',
    size: '1G',
    format: 'raw',
  });
  t.same(raw.body, { data: 'local:9999/vm-9999-pvc-g.raw' });
  const mismatch = await call('POST', content('hyper1', 'local'), {
    vmid: 9999,
    filename: 'vm-9999-pvc-h.raw',
    size: '1G',
    format: 'qcow2',
  });
  t.equal(mismatch.status, 400, 'the API checks the extension against format first');
  const bare = await call('POST', content('hyper1', 'local'), { vmid: 9999, filename: 'vm-9999-pvc-h', size: '1G' });
  t.equal(bare.statusText, "unable to parse volume filename 'vm-9999-pvc-h'");
  const dup = await call('POST', content('hyper1', 'local'), {
    vmid: 9999,
    filename: 'vm-9999-pvc-f.qcow2',
    size: '1G',
  });
  t.equal(dup.statusText, "disk image '/var/lib/vz/images/9999/vm-9999-pvc-f.qcow2' already exists");
  const list = (await call('GET', content('hyper1', 'local'), { vmid: 9999 })).body?.data as Record<string, unknown>[];
  t.same(
    list.map((v) => [v.volid, v.format, v.vmid]),
    [
      ['local:9999/vm-9999-pvc-f.qcow2', 'qcow2', 9999],
      ['local:9999/vm-9999-pvc-g.raw', 'raw', 9999],
    ],
  );
  const info = await call(
    'GET',
    `${content('hyper1', 'local')}/${encodeURIComponent('local:9999/vm-9999-pvc-f.qcow2')}`,
  );
  t.same(info.body?.data, {
    path: '/var/lib/vz/images/9999/vm-9999-pvc-f.qcow2',
    size: GiB,
    used: 0,
    format: 'qcow2',
  });
  const del = await call(
    'DELETE',
    `${content('hyper1', 'local')}/${encodeURIComponent('local:9999/vm-9999-pvc-g.raw')}`,
  );
  t.match(await waitTask('hyper1', del.body?.data as string), { exitstatus: 'OK' });
});

t.test('shared storages: one set of volumes on every node, flagged shared', async (t) => {
  const r = await call('POST', content('hyper1', 'nas'), { vmid: 9999, filename: 'vm-9999-pvc-s.raw', size: '1G' });
  t.same(r.body, { data: 'nas:9999/vm-9999-pvc-s.raw' });
  const seen = (await call('GET', content('hyper2', 'nas'), { vmid: 9999 })).body?.data as Record<string, unknown>[];
  t.same(
    seen.map((v) => v.volid),
    ['nas:9999/vm-9999-pvc-s.raw'],
    'hyper2 lists what hyper1 allocated',
  );
  const rows = (await call('GET', '/cluster/resources', { type: 'storage' })).body?.data as Record<string, unknown>[];
  const flag = (id: string) => [...new Set(rows.filter((x) => x.storage === id).map((x) => x.shared))];
  t.same(flag('nas'), [1]);
  t.same(flag('ceph'), [1]);
  t.same(flag('local-zfs'), [0]);
  t.same(
    rows.filter((x) => x.storage === 'nas').map((x) => x.node),
    ['hyper1', 'hyper2'],
  );
  const status = (await call('GET', '/nodes/hyper2/storage/ceph/status')).body?.data as Record<string, unknown>;
  t.match(status, { shared: 1, type: 'rbd' });
});

t.test('free while a running VM holds the volume: each plugin answers its own way', async (t) => {
  for (const [storage, volname, want] of [
    ['local-zfs', 'vm-9999-pvc-busy', "zfs error: cannot destroy 'rpool/data/vm-9999-pvc-busy': dataset is busy"],
    ['ceph', 'vm-9999-pvc-busy', "rbd rm 'vm-9999-pvc-busy' error: rbd: error: image still has watchers"],
  ] as const) {
    await call('POST', content('hyper1', storage), { vmid: 9999, filename: volname, size: '1G' });
    const put = await call('PUT', '/nodes/hyper1/qemu/111/config', { scsi5: `${storage}:${volname}` });
    t.equal(put.status, 200, put.statusText);
    const del = await call('DELETE', `${content('hyper1', storage)}/${storage}:${volname}`);
    t.match(await waitTask('hyper1', del.body?.data as string), { exitstatus: want });
    await call('PUT', '/nodes/hyper1/qemu/111/unlink', { idlist: 'scsi5' });
  }
  // A file storage unlinks the file even while it is open (Plugin.pm free_image).
  await call('POST', content('hyper1', 'local'), { vmid: 9999, filename: 'vm-9999-pvc-busy.raw', size: '1G' });
  await call('PUT', '/nodes/hyper1/qemu/111/config', { scsi5: 'local:9999/vm-9999-pvc-busy.raw' });
  const del = await call(
    'DELETE',
    `${content('hyper1', 'local')}/${encodeURIComponent('local:9999/vm-9999-pvc-busy.raw')}`,
  );
  t.match(await waitTask('hyper1', del.body?.data as string), { exitstatus: 'OK' });
});
