// The simulator driven by a Proxmox client that is not ours: the `proxmox-api` npm package,
// unmodified, with an undici Agent pinning the simulator's CA as its fetch dispatcher.

import { readFileSync } from 'node:fs';
import { proxmoxApi } from 'proxmox-api';
import t from 'tap';
import { Agent, fetch } from 'undici';
import { startTestSim, wwnForSlot } from './fixtures/helpers.js';

const ts = await startTestSim();
t.teardown(() => ts.close());
const { sim } = ts;
const agent = new Agent({ connect: { ca: readFileSync(sim.caFile) } });
t.teardown(() => agent.close());

const client = (tokenSecret = sim.tokenSecret) =>
  proxmoxApi({
    host: sim.host,
    port: sim.port,
    tokenID: sim.tokenId,
    tokenSecret,
    // proxmox-api leaves its abort timer running when fetch throws; a short timeout keeps it brief
    queryTimeout: 1000,
    fetch: (url, init) => fetch(url, { ...init, dispatcher: agent }),
  });
const api = client();

async function waitTask(node: string, upid: string): Promise<{ status: string; exitstatus?: string }> {
  for (;;) {
    const st = (await api.nodes.$(node).tasks.$(upid).status.$get()) as { status: string; exitstatus?: string };
    if (st.status === 'stopped') return st;
    await new Promise((r) => setTimeout(r, 10));
  }
}

t.test('a full CSI volume lifecycle through proxmox-api', async (t) => {
  t.match(await api.version.$get(), { version: '9.2.11' });
  const vms = await api.cluster.resources.$get({ type: 'vm' });
  const worker = vms.find((v) => v.name === 'talos-worker-1');
  t.match(worker, { vmid: 111, node: 'hyper1', status: 'running' });
  const hyper1 = api.nodes.$('hyper1');

  // proxmox-api types this answer as any; the fields are the API's (GET .../storage/{storage}/status).
  const st = (await hyper1.storage.$('local-lvm').status.$get()) as { total: number };
  t.equal(st.total, 200 * 1024 ** 3);
  const volid = await hyper1.storage
    .$('local-lvm')
    .content.$post({ vmid: 9999, filename: 'vm-9999-pvc-0b1c', size: '10G' });
  t.equal(volid, 'local-lvm:vm-9999-pvc-0b1c');

  const vm = hyper1.qemu.$(111);
  const before = await vm.config.$get();
  await vm.config.$put({
    scsi1: `${volid},backup=1,iothread=1,cache=writethrough,discard=on,ssd=1,wwn=${wwnForSlot(1)}`,
    digest: before.digest,
  });
  const cfg = await vm.config.$get();
  t.equal(
    cfg.scsi1,
    `${volid},backup=1,cache=writethrough,discard=on,iothread=1,size=10G,ssd=1,wwn=0x5056432d49443031`,
  );
  const pending = await vm.pending.$get();
  t.ok(pending.every((p) => p.pending === undefined && p.delete === undefined));

  const upid = await vm.resize.$put({ disk: 'scsi1', size: '+1G' });
  t.match(upid, /^UPID:hyper1:/);
  t.equal((await waitTask('hyper1', upid)).exitstatus, 'OK');
  t.match((await vm.config.$get()).scsi1, /size=11G/);

  const post = await vm.config.$post({ delete: 'scsi1' });
  t.equal((await waitTask('hyper1', post)).exitstatus, 'OK');
  await vm.config.$put({ scsi1: volid });
  await vm.unlink.$put({ idlist: 'scsi1' });
  t.notOk('scsi1' in (await vm.config.$get()));

  const del = await hyper1.storage.$('local-lvm').content.$(volid).$delete();
  t.equal((await waitTask('hyper1', del)).exitstatus, 'OK');
  const left = await hyper1.storage.$('local-lvm').content.$get({ vmid: 9999 });
  t.same(left, []);
});

t.test('errors come back as the client formats them', async (t) => {
  const hyper1 = api.nodes.$('hyper1');
  await t.rejects(
    hyper1.qemu.$(101).config.$put({ scsi1: 'local-lvm:vm-9999-missing' }),
    /return Error 500 volume local-lvm:vm-9999-missing does not exist: \{"data":null,"message":"volume local-lvm:vm-9999-missing does not exist\\n"\}/,
  );
  await t.rejects(
    hyper1.storage.$('local-lvm').content.$post({ vmid: 9999, filename: 'vm-9999-x', size: '1X' }),
    /return Error 400 Parameter verification failed\.: .*"errors":\{"size":"value does not match the regex pattern"\}/,
  );
  const wrong = client('00000000-0000-0000-0000-000000000000');
  await t.rejects(wrong.version.$get(), /return Error 401 invalid token value!/);
  const untyped = api.nodes.$('hyper1').qemu.$(101) as unknown as { frob: { $get(): Promise<unknown> } };
  await t.rejects(
    untyped.frob.$get(),
    /connection failed with 501 Method 'GET \/nodes\/hyper1\/qemu\/101\/frob' not implemented/,
  );
});

t.test('a dropped connection is retried once by the client, POST included', async (t) => {
  await ts.admin.resetCounters();
  await ts.admin.patchFaults({
    dropRate: 1,
    dropPhase: 'after',
    dropRoutes: ['POST /nodes/{node}/storage/{storage}/content'],
  });
  await t.rejects(
    api.nodes.$('hyper2').storage.$('local-lvm').content.$post({ vmid: 9999, filename: 'vm-9999-twice', size: '1G' }),
    /FaILED to call POST/,
  );
  const counters = await ts.admin.counters();
  t.equal(
    counters.byRoute['POST /nodes/{node}/storage/{storage}/content'],
    2,
    'the same request reached the API twice',
  );
  await ts.admin.setFaults({});
  const vols = await api.nodes.$('hyper2').storage.$('local-lvm').content.$get({ vmid: 9999 });
  t.same(
    vols.map((v) => v.volid),
    ['local-lvm:vm-9999-twice'],
    'the first attempt created it',
  );
});
