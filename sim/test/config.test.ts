// VM config updates: attach/detach as the Proxmox CSI driver does them, pending semantics, unusedN,
// digest, parameter errors, sync vs async.

import t from 'tap';
import { startTestSim, wwnForSlot } from './fixtures/helpers.js';

const ts = await startTestSim();
t.teardown(() => ts.close());
const { call, waitTask, admin } = ts;
const VM = '/nodes/hyper1/qemu/101';

async function alloc(name: string, size = '10G', node = 'hyper1'): Promise<string> {
  const r = await call('POST', `/nodes/${node}/storage/local-lvm/content`, { vmid: 9999, filename: name, size });
  if (r.status !== 200) throw new Error(r.statusText);
  return r.body?.data as string;
}
const config = async (current = false) =>
  (await call('GET', `${VM}/config`, current ? { current: 1 } : {})).body?.data as Record<string, unknown>;
const pending = async () => (await call('GET', `${VM}/pending`)).body?.data as Array<Record<string, unknown>>;

t.test('attach a CSI volume to a running VM, normalised like qemu-server prints it', async (t) => {
  const volid = await alloc('vm-9999-pvc-a');
  const before = (await config()).digest;
  const value = `${volid},backup=0,iothread=1,cache=writethrough,discard=on,ssd=1,wwn=${wwnForSlot(1)},mbps_rd=100,iops_wr=500`;
  const r = await call('PUT', `${VM}/config`, { scsi1: value });
  t.same(r.body, { data: null }, 'PUT config is synchronous and returns null');
  const c = await config();
  t.equal(
    c.scsi1,
    `${volid},backup=0,cache=writethrough,discard=on,iops_wr=500,iothread=1,mbps_rd=100,size=10G,ssd=1,wwn=0x5056432d49443031`,
  );
  t.not(c.digest, before);
  t.ok(
    (await pending()).every((i) => i.pending === undefined && i.delete === undefined),
    'hot-plugged, nothing pending',
  );
  const retry = await call('PUT', `${VM}/config`, { scsi1: value });
  t.equal(retry.status, 200, 'attaching the same volume again succeeds (driver retries)');
  t.match((await config()).scsi1, /^local-lvm:vm-9999-pvc-a,/);
});

t.test('detach with unlink: a foreign volume leaves no unusedN; repeating only warns', async (t) => {
  const r = await call('PUT', `${VM}/unlink`, { idlist: 'scsi1' });
  t.same(r.body, { data: null });
  const c = await config();
  t.notOk('scsi1' in c);
  t.notOk(Object.keys(c).some((k) => k.startsWith('unused')));
  const again = await call('PUT', `${VM}/unlink`, { idlist: 'scsi1' });
  t.equal(again.status, 200, 'deleting an unset key is only a warning');
  const list = (await call('GET', '/nodes/hyper1/storage/local-lvm/content', { vmid: 9999 })).body?.data as unknown[];
  t.equal(list.length, 1, 'unlink without force keeps the volume');
});

t.test('a volume the VM owns becomes unusedN; deleting unusedN frees it', async (t) => {
  const r = await call('POST', '/nodes/hyper1/storage/local-lvm/content', {
    vmid: 101,
    filename: 'vm-101-disk-5',
    size: '1G',
  });
  await call('PUT', `${VM}/config`, { scsi2: r.body?.data as string });
  await call('PUT', `${VM}/unlink`, { idlist: 'scsi2' });
  t.equal((await config()).unused0, 'local-lvm:vm-101-disk-5');
  await call('PUT', `${VM}/config`, { delete: 'unused0' });
  t.notOk('unused0' in (await config()));
  const gone = await call('GET', '/nodes/hyper1/storage/local-lvm/content/local-lvm:vm-101-disk-5');
  t.equal(gone.status, 500, 'freed');
});

t.test('new-disk syntax storage:SIZE allocates vm-<vmid>-disk-N', async (t) => {
  await call('PUT', `${VM}/config`, { scsi3: 'local-lvm:1,backup=0' });
  t.equal((await config()).scsi3, 'local-lvm:vm-101-disk-1,backup=0,size=1G');
  const r = await call('PUT', `${VM}/unlink`, { idlist: 'scsi3', force: 1 });
  t.equal(r.status, 200);
  const c = await config(true);
  t.notOk('scsi3' in c);
  t.notOk('unused0' in c, 'force frees an owned disk instead of keeping it as unused');
});

t.test('digest mismatch, VM lock, missing volume, missing VM', async (t) => {
  const volid = await alloc('vm-9999-pvc-b');
  const stale = await call('PUT', `${VM}/config`, { scsi1: volid, digest: '0'.repeat(40) });
  t.equal(stale.status, 500);
  t.equal(stale.statusText, 'checksum mismatch (file change by other user?)');
  const ok = await call('PUT', `${VM}/config`, { scsi1: volid, digest: (await config()).digest as string });
  t.equal(ok.status, 200, 'the current digest is accepted');
  await admin.patchVm(101, { lock: 'backup' });
  const locked = await call('PUT', `${VM}/unlink`, { idlist: 'scsi1' });
  t.equal(locked.statusText, 'VM is locked (backup)');
  await admin.patchVm(101, { lock: null });
  t.equal((await call('PUT', `${VM}/unlink`, { idlist: 'scsi1' })).status, 200);
  const nope = await call('PUT', `${VM}/config`, { scsi1: 'local-lvm:vm-9999-nope' });
  t.equal(nope.statusText, 'volume local-lvm:vm-9999-nope does not exist');
  const wrongHost = await call('PUT', '/nodes/hyper2/qemu/102/config', { scsi1: volid });
  t.equal(wrongHost.statusText, `volume ${volid} does not exist`, "another host's local-lvm does not have it");
  const vm = await call('PUT', '/nodes/hyper1/qemu/777/config', { scsi1: volid });
  t.equal(vm.statusText, "Configuration file 'nodes/hyper1/qemu-server/777.conf' does not exist");
});

t.test('bad parameters are 400 with per-parameter errors', async (t) => {
  const drive = await call('PUT', `${VM}/config`, { scsi1: 'local-lvm:vm-9999-pvc-b,cache=fast' });
  t.equal(drive.status, 400);
  t.match(
    drive.body?.errors?.scsi1,
    /^invalid format - format error\nscsi1\.cache: value 'fast' does not have a value in the enumeration/,
  );
  const slot = await call('PUT', `${VM}/config`, { scsi31: 'local-lvm:vm-9999-pvc-b' });
  t.same(slot.body?.errors, {
    scsi31: 'property is not defined in schema and the schema does not allow additional properties',
  });
  const del = await call('PUT', `${VM}/config`, { delete: 'frob' });
  t.same(del.body?.errors, { delete: "unknown option 'frob'" });
  const both = await call('PUT', `${VM}/config`, { delete: 'scsi1', scsi1: 'local-lvm:vm-9999-pvc-b' });
  t.same(both.body?.errors, { delete: "you can't use '-scsi1' and -delete scsi1' at the same time" });
  const none = await call('PUT', `${VM}/config`, {});
  t.equal(none.status, 500);
  t.equal(none.statusText, 'no options specified');
  const force = await call('PUT', `${VM}/config`, { force: 1, scsi1: 'local-lvm:vm-9999-pvc-b' });
  t.same(force.body?.errors, { force: "missing property - 'delete' is required by 'force'" });
  const digest = await call('PUT', `${VM}/config`, { scsi1: 'local-lvm:vm-9999-pvc-b', digest: 'x'.repeat(41) });
  t.same(digest.body?.errors, { digest: 'value may only be 40 characters long' });
  const idlist = await call('PUT', `${VM}/unlink`, {});
  t.same(idlist.body?.errors, { idlist: 'property is missing and it is not optional' });
});

t.test('POST config runs a qmconfig task; warnings and background_delay', async (t) => {
  const volid = await alloc('vm-9999-pvc-c');
  const r = await call('POST', `${VM}/config`, { scsi4: `${volid},backup=0` });
  const upid = r.body?.data as string;
  t.match(upid, /^UPID:hyper1:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:qmconfig:101:kubernetes-csi@pve!csi:$/);
  const st = await waitTask('hyper1', upid);
  t.equal(st.exitstatus, 'OK');
  t.equal((await config()).scsi4, `${volid},backup=0,size=10G`);
  const log = (await call('GET', `/nodes/hyper1/tasks/${encodeURIComponent(upid)}/log`)).body?.data as Array<{
    t: string;
  }>;
  t.equal(log[0]?.t, `update VM 101: -scsi4 ${volid},backup=0`);
  const warn = await call('POST', `${VM}/config`, { delete: 'scsi9' });
  const wst = await waitTask('hyper1', warn.body?.data as string);
  t.equal(wst.exitstatus, 'WARNINGS: 1', 'a delete of an unset key ends with warnings, which is success');
  const wlog = (await call('GET', `/nodes/hyper1/tasks/${encodeURIComponent(warn.body?.data as string)}/log`)).body
    ?.data as Array<{ t: string }>;
  t.same(
    wlog.slice(1).map((l) => l.t),
    ["WARN: cannot delete 'scsi9' - not set in current configuration!", 'TASK WARNINGS: 1'],
  );
  const bg = await call('POST', `${VM}/config`, { delete: 'scsi4', background_delay: 5 });
  t.same(bg.body, { data: null }, 'background_delay returns null when the task finished in time');
  t.notOk('scsi4' in (await config()));
  const task = await call('GET', `/nodes/hyper2/tasks/${encodeURIComponent(upid)}/status`);
  t.same(task.body?.errors, { upid: 'no such task' }, 'a task is only known on its node');
  const junk = await call('GET', '/nodes/hyper1/tasks/notaupid/status');
  t.same(junk.body?.errors, { upid: 'unable to parse worker upid' });
});

t.test('stopped VM: changes apply directly, nothing is hot-plugged', async (t) => {
  await admin.patchVm(111, { status: 'stopped' });
  const volid = await alloc('vm-9999-pvc-d');
  await call('PUT', '/nodes/hyper1/qemu/111/config', { scsi1: volid });
  const c = (await call('GET', '/nodes/hyper1/qemu/111/config', { current: 1 })).body?.data as Record<string, unknown>;
  t.equal(c.scsi1, `${volid},size=10G`);
  await call('PUT', '/nodes/hyper1/qemu/111/unlink', { idlist: 'scsi1' });
  const after = (await call('GET', '/nodes/hyper1/qemu/111/config', { current: 1 })).body?.data as Record<
    string,
    unknown
  >;
  t.notOk('scsi1' in after);
  const boot = await call('PUT', '/nodes/hyper1/qemu/111/config', { delete: 'scsi0' });
  t.equal(boot.status, 200, 'a stopped VM can lose its boot disk');
  await admin.patchVm(111, { status: 'running' });
});

t.test('the boot disk of a running VM cannot be unplugged and stays pending', async (t) => {
  const r = await call('PUT', `${VM}/config`, { delete: 'scsi0' });
  t.equal(r.status, 400);
  t.same(r.body?.errors, { scsi0: "hotplug problem - can't unplug bootdisk 'scsi0'" });
  const p = await pending();
  t.match(
    p.find((i) => i.key === 'scsi0'),
    { delete: 1 },
  );
  await call('PUT', `${VM}/config`, { revert: 'scsi0,boot' });
  t.notOk(
    (await pending()).some((i) => i.delete !== undefined),
    'revert clears the pending delete',
  );
});

t.test('concurrent writers on one VM serialise on the config lock', async (t) => {
  await admin.patchFaults({ lockHoldMs: 40 });
  const vols = await Promise.all([1, 2, 3, 4, 5].map((i) => alloc(`vm-9999-pvc-conc${i}`, '1G')));
  const started = Date.now();
  const results = await Promise.all(vols.map((v, i) => call('PUT', `${VM}/config`, { [`scsi${10 + i}`]: v })));
  t.ok(results.every((r) => r.status === 200));
  t.ok(Date.now() - started >= 5 * 40, 'one writer at a time');
  const c = await config();
  t.equal([10, 11, 12, 13, 14].filter((i) => `scsi${i}` in c).length, 5);
  await admin.patchFaults({ lockHoldMs: 0 });
  await call('PUT', `${VM}/unlink`, { idlist: 'scsi10,scsi11,scsi12,scsi13,scsi14' });
  t.notOk(Object.keys(await config()).some((k) => /^scsi1\d$/.test(k)));
});
