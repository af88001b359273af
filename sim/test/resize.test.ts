// PUT …/resize is a `resize` task in PVE 8: errors show up as the task's exitstatus.

import t from 'tap';
import { AUDITOR, defaultConfig, startTestSim } from './fixtures/helpers.js';

const cfg = defaultConfig();
cfg.tokens.push(AUDITOR);
const ts = await startTestSim({ config: cfg });
t.teardown(() => ts.close());
const { call, callAs, waitTask } = ts;
const VM = '/nodes/hyper2/qemu/112';

const r0 = await call('POST', '/nodes/hyper2/storage/local-lvm/content', {
  vmid: 9999,
  filename: 'vm-9999-pvc-r',
  size: '10G',
});
await call('PUT', `${VM}/config`, { scsi1: `${r0.body?.data as string},backup=0` });

async function resize(params: Record<string, string>) {
  const r = await call('PUT', `${VM}/resize`, params);
  if (r.status !== 200) return { http: r };
  const upid = r.body?.data as string;
  return { http: r, upid, st: await waitTask('hyper2', upid) };
}
/** The task of a resize the API accepted; a refused one fails the test with the answer. */
function upidOf(res: Awaited<ReturnType<typeof resize>>): string {
  if (!res.upid) throw new Error(`resize answered ${res.http.status}: ${res.http.text}`);
  return res.upid;
}
const volSize = async () =>
  (
    (await call('GET', '/nodes/hyper2/storage/local-lvm/content/local-lvm:vm-9999-pvc-r')).body?.data as {
      size: number;
    }
  ).size;
const scsi1 = async () => ((await call('GET', `${VM}/config`)).body?.data as Record<string, string>).scsi1;

t.test('grow absolute and relative; config records the requested size', async (t) => {
  const a = await resize({ disk: 'scsi1', size: '12G' });
  t.match(a.upid, /:resize:112:kubernetes-csi@pve!csi:$/);
  t.equal(a.st?.exitstatus, 'OK');
  t.equal(await volSize(), 12 * 1024 ** 3);
  t.equal(await scsi1(), 'local-lvm:vm-9999-pvc-r,backup=0,size=12G');
  const b = await resize({ disk: 'scsi1', size: '+512M' });
  t.equal(b.st?.exitstatus, 'OK');
  t.equal(await volSize(), 12.5 * 1024 ** 3);
  t.equal(await scsi1(), 'local-lvm:vm-9999-pvc-r,backup=0,size=12800M');
  const same = await resize({ disk: 'scsi1', size: '12800M' });
  t.equal(same.st?.exitstatus, 'OK', 'same size is a no-op');
  const odd = await resize({ disk: 'scsi1', size: '13107201K' });
  t.equal(odd.st?.exitstatus, 'OK');
  t.equal(await volSize(), 12.5 * 1024 ** 3 + 4 * 1024 ** 2, 'the LV grows by whole extents');
  t.equal(await scsi1(), 'local-lvm:vm-9999-pvc-r,backup=0,size=13107201K');
});

t.test('errors end up in the task', async (t) => {
  const shrink = await resize({ disk: 'scsi1', size: '1G' });
  t.equal(shrink.st?.exitstatus, 'shrinking disks is not supported');
  const log = (await call('GET', `/nodes/hyper2/tasks/${encodeURIComponent(upidOf(shrink))}/log`)).body?.data as Array<{
    t: string;
  }>;
  t.equal(log.at(-1)?.t, 'TASK ERROR: shrinking disks is not supported');
  const missing = await resize({ disk: 'scsi9', size: '20G' });
  t.equal(missing.st?.exitstatus, "disk 'scsi9' does not exist");
  const noVm = await call('PUT', '/nodes/hyper2/qemu/999/resize', { disk: 'scsi1', size: '20G' });
  t.equal(noVm.status, 200, 'PVE forks before loading the config');
  t.equal(
    (await waitTask('hyper2', noVm.body?.data as string)).exitstatus,
    "Configuration file 'nodes/hyper2/qemu-server/999.conf' does not exist",
  );
  const digest = await resize({ disk: 'scsi1', size: '20G', digest: 'f'.repeat(40) });
  t.equal(digest.st?.exitstatus, 'checksum mismatch (file change by other user?)');
});

t.test('parameter and permission errors are immediate', async (t) => {
  const pattern = await call('PUT', `${VM}/resize`, { disk: 'scsi1', size: '20GB' });
  t.same(pattern.body?.errors, { size: 'value does not match the regex pattern' });
  const disk = await call('PUT', `${VM}/resize`, { disk: 'scsi99', size: '20G' });
  t.equal(disk.status, 400);
  t.match(disk.body?.errors?.disk, /^value 'scsi99' does not have a value in the enumeration 'ide0, /);
  const perm = await callAs(`PVEAPIToken=${AUDITOR.id}=${AUDITOR.secret}`, 'PUT', `${VM}/resize`, {
    disk: 'scsi1',
    size: '20G',
  });
  t.equal(perm.status, 403);
  t.equal(perm.statusText, 'Permission check failed (/vms/112, VM.Config.Disk)');
});

t.test("another user's task needs Sys.Audit", async (t) => {
  const r = await resize({ disk: 'scsi1', size: '+4M' });
  const other = await callAs(
    `PVEAPIToken=${AUDITOR.id}=${AUDITOR.secret}`,
    'GET',
    `/nodes/hyper2/tasks/${encodeURIComponent(upidOf(r))}/status`,
  );
  t.equal(other.status, 200, 'the auditor role has Sys.Audit');
  const cfg2 = defaultConfig();
  cfg2.tokens.push({ id: 'ops@pve!a1', secret: '12345678-1234-1234-1234-1234567890ab', role: 'CSI' });
  const ts2 = await startTestSim({ config: cfg2 });
  t.teardown(() => ts2.close());
  const mine = await ts2.call('PUT', '/nodes/hyper1/qemu/101/resize', { disk: 'scsi0', size: '+4M' });
  const upid = mine.body?.data as string;
  const denied = await ts2.callAs(
    'PVEAPIToken=ops@pve!a1=12345678-1234-1234-1234-1234567890ab',
    'GET',
    `/nodes/hyper1/tasks/${encodeURIComponent(upid)}/status`,
  );
  t.equal(denied.status, 403);
  t.equal(denied.statusText, 'Permission check failed (/nodes/hyper1, Sys.Audit)');
});
