// Read endpoints, authentication, privileges and the HTTP envelope, over plain fetch/https.

import { request } from 'node:https';
import { readFileSync } from 'node:fs';
import t from 'tap';
import { AUDITOR, NOBODY, defaultConfig, startTestSim } from './fixtures/helpers.js';

const cfg = defaultConfig();
cfg.tokens.push(AUDITOR, NOBODY);
const ts = await startTestSim({ config: cfg });
t.teardown(() => ts.close());
const { call, callAs, sim } = ts;

t.test('GET /version: JSON envelope with the exact content type', async (t) => {
  const r = await call('GET', '/version');
  t.equal(r.status, 200);
  t.equal(r.contentType, 'application/json;charset=UTF-8');
  t.same(r.body, { data: { version: '9.2.11', release: '9.2', repoid: '14a22df35955d97d' } });
});

t.test('cluster/resources filters by type and lists the seed cluster', async (t) => {
  const vms = (await call('GET', '/cluster/resources', { type: 'vm' })).body?.data as Array<Record<string, unknown>>;
  t.same(
    vms.map((v) => v.vmid),
    [101, 102, 103, 111, 112, 113],
  );
  const cp1 = vms.find((v) => v.vmid === 101);
  t.match(cp1, { id: 'qemu/101', type: 'qemu', name: 'talos-cp-1', node: 'hyper1', status: 'running', template: 0 });
  t.equal(cp1?.maxdisk, 32 * 1024 ** 3);
  const storages = (await call('GET', '/cluster/resources', { type: 'storage' })).body?.data as Array<
    Record<string, unknown>
  >;
  t.same(
    storages.map((s) => s.id),
    ['storage/hyper1/local-lvm', 'storage/hyper2/local-lvm', 'storage/hyper3/local-lvm'],
  );
  t.match(storages[0], { plugintype: 'lvmthin', status: 'available', maxdisk: 200 * 1024 ** 3, shared: 0 });
  const nodes = (await call('GET', '/cluster/resources', { type: 'node' })).body?.data as Array<
    Record<string, unknown>
  >;
  t.same(
    nodes.map((n) => n.node),
    ['hyper1', 'hyper2', 'hyper3'],
  );
  t.notOk(
    nodes.some((n) => 'maxmem' in n),
    'no node stats without Sys.Audit',
  );
  const all = (await call('GET', '/cluster/resources')).body?.data as unknown[];
  t.equal(all.length, 12);
  const bad = await call('GET', '/cluster/resources', { type: 'lxc' });
  t.equal(bad.status, 400);
  t.equal(bad.statusText, 'Parameter verification failed.');
  t.same(bad.body, {
    data: null,
    errors: { type: "value 'lxc' does not have a value in the enumeration 'vm, storage, node, sdn'" },
    message: 'Parameter verification failed.\n',
  });
});

t.test('nodes, qemu list, status/current', async (t) => {
  const nodes = (await call('GET', '/nodes')).body?.data as Array<Record<string, unknown>>;
  t.same(
    nodes.map((n) => [n.node, n.status]),
    [
      ['hyper1', 'online'],
      ['hyper2', 'online'],
      ['hyper3', 'online'],
    ],
  );
  const list = (await call('GET', '/nodes/hyper2/qemu')).body?.data as Array<Record<string, unknown>>;
  t.same(
    list.map((v) => [v.vmid, v.name, v.status]),
    [
      [102, 'talos-cp-2', 'running'],
      [112, 'talos-worker-2', 'running'],
    ],
  );
  const st = await call('GET', '/nodes/hyper2/qemu/112/status/current');
  t.match(st.body?.data, { vmid: 112, status: 'running', qmpstatus: 'running', name: 'talos-worker-2' });
  const other = await call('GET', '/nodes/hyper1/qemu/112/status/current');
  t.equal(other.status, 500, 'a VM is only found on its own node');
  t.equal(other.statusText, "Configuration file 'nodes/hyper1/qemu-server/112.conf' does not exist");
  const noNode = await call('GET', '/nodes/hyper9/qemu');
  t.equal(noNode.status, 500);
  t.match(noNode.body?.message, /hostname lookup 'hyper9' failed/);
});

t.test('config and pending of an untouched VM', async (t) => {
  const c = (await call('GET', '/nodes/hyper1/qemu/111/config')).body?.data as Record<string, unknown>;
  t.match(c, {
    name: 'talos-worker-1',
    scsihw: 'virtio-scsi-single',
    scsi0: 'local-lvm:vm-111-disk-0,iothread=1,size=64G',
    smbios1: 'uuid=6f0a4c1e-2b3d-4e5f-8a9b-0c1d2e3f4b11',
    cores: 4,
  });
  t.match(c.digest, /^[0-9a-f]{40}$/);
  const p = (await call('GET', '/nodes/hyper1/qemu/111/pending')).body?.data as Array<Record<string, unknown>>;
  t.ok(p.every((i) => i.pending === undefined && i.delete === undefined));
  t.same(
    p.find((i) => i.key === 'digest'),
    { key: 'digest', value: c.digest },
  );
  const vmidBad = await call('GET', '/nodes/hyper1/qemu/abc/config');
  t.equal(vmidBad.status, 400);
  t.same(vmidBad.body?.errors, { vmid: "type check ('integer') failed - got 'abc'" });
  const extra = await call('GET', '/nodes/hyper1/qemu/111/config', { bogus: 1 });
  t.same(extra.body?.errors, {
    bogus: 'property is not defined in schema and the schema does not allow additional properties',
  });
});

t.test('authentication failures are 401 with the reason as status text and no body', async (t) => {
  const none = await callAs(undefined, 'GET', '/version');
  t.equal(none.status, 401);
  t.equal(none.statusText, 'No ticket');
  t.equal(none.contentType, null);
  t.equal(none.text, '');
  const wrong = await callAs(`PVEAPIToken=${sim.tokenId}=00000000-0000-0000-0000-000000000000`, 'GET', '/version');
  t.equal(wrong.statusText, 'invalid token value!');
  const noTok = await callAs(
    'PVEAPIToken=kubernetes-csi@pve!other=00000000-0000-0000-0000-000000000000',
    'GET',
    '/version',
  );
  t.equal(noTok.statusText, "no such token 'other' for user 'kubernetes-csi@pve'");
  const noUser = await callAs('PVEAPIToken=ghost@pve!xx=00000000-0000-0000-0000-000000000000', 'GET', '/version');
  t.equal(noUser.statusText, "no such user ('ghost@pve')");
  const cookie = await callAs('PVEAuthCookie=PVE:root@pam:abc', 'GET', '/version');
  t.equal(cookie.statusText, 'permission denied - invalid PVE ticket');
  const counters = await ts.admin.counters();
  t.equal(counters.errorsByRoute['GET /version'], 5, 'failed logins are counted');
});

t.test('privileges: 403 names path and privilege, lists are filtered', async (t) => {
  const aud = `PVEAPIToken=${AUDITOR.id}=${AUDITOR.secret}`;
  const nob = `PVEAPIToken=${NOBODY.id}=${NOBODY.secret}`;
  const put = await callAs(aud, 'PUT', '/nodes/hyper1/qemu/101/config', { scsi1: 'local-lvm:vm-101-disk-0' });
  t.equal(put.status, 403);
  t.equal(
    put.statusText,
    'Permission check failed (/vms/101, VM.Config.Disk|VM.Config.CDROM|VM.Config.CPU|VM.Config.Memory|VM.Config.Network|VM.Config.HWType|VM.Config.Options|VM.Config.Cloudinit)',
  );
  const alloc = await callAs(aud, 'POST', '/nodes/hyper1/storage/local-lvm/content', {
    vmid: 9999,
    filename: 'vm-9999-x',
    size: '1G',
  });
  t.equal(alloc.status, 403);
  t.equal(alloc.body?.message, 'Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)\n');
  const opt = await call('PUT', '/nodes/hyper1/qemu/101/config', { name: 'renamed' });
  t.equal(opt.status, 403, 'the CSI role may not rename a VM');
  t.equal(opt.statusText, 'Permission check failed (/vms/101, VM.Config.Options)');
  const empty = await callAs(nob, 'GET', '/cluster/resources', { type: 'vm' });
  t.same(empty.body?.data, [], 'no VM.Audit: VMs are hidden, not refused');
  const audNodes = (await callAs(aud, 'GET', '/nodes')).body?.data as Array<Record<string, unknown>>;
  t.ok(audNodes.length > 0 && audNodes.every((n) => 'maxmem' in n), 'Sys.Audit shows node stats');
  const st = await callAs(nob, 'GET', '/nodes/hyper1/storage/local-lvm/status');
  t.equal(st.statusText, 'Permission check failed (/storage/local-lvm, Datastore.Audit|Datastore.AllocateSpace)');
});

t.test('unknown paths and methods', async (t) => {
  const r = await call('GET', '/nodes/hyper1/frobnicate');
  t.equal(r.status, 501);
  t.equal(r.statusText, "Method 'GET /nodes/hyper1/frobnicate' not implemented");
  const d = await call('DELETE', '/version');
  t.equal(d.status, 501);
  const fmt = await ts.agent.request({ origin: new URL(sim.url).origin, path: '/api2/extjs/version', method: 'GET' });
  t.equal(fmt.statusCode, 501);
  await fmt.body.dump();
});

t.test('large answers are gzipped when asked for, plain https client', async (t) => {
  const url = new URL(`${sim.url}/cluster/resources`);
  const res = await new Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }>(
    (resolve, reject) => {
      const req = request(
        url,
        {
          ca: readFileSync(sim.caFile),
          headers: { Authorization: `PVEAPIToken=${sim.tokenId}=${sim.tokenSecret}`, 'Accept-Encoding': 'gzip' },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
          );
        },
      );
      req.on('error', reject);
      req.end();
    },
  );
  t.equal(res.status, 200);
  t.equal(res.headers['content-encoding'], 'gzip');
  const { gunzipSync } = await import('node:zlib');
  t.equal((JSON.parse(gunzipSync(res.body).toString()) as { data: unknown[] }).data.length, 12);
});

t.test('JSON request bodies are accepted like form bodies', async (t) => {
  const r = await ts.agent.request({
    origin: new URL(sim.url).origin,
    path: '/api2/json/nodes/hyper3/storage/local-lvm/content',
    method: 'POST',
    headers: { Authorization: `PVEAPIToken=${sim.tokenId}=${sim.tokenSecret}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ vmid: 9999, filename: 'vm-9999-json', size: '1G' }),
  });
  t.equal(r.statusCode, 200);
  t.same(await r.body.json(), { data: 'local-lvm:vm-9999-json' });
});
