// Offline migration of a stopped helper VM that carries a local disk to another node, plus the
// VM create/destroy calls around it: the route `pve-nfs-csi move` takes (docs/day2.md).

import { readFile, writeFile } from 'node:fs/promises';
import t from 'tap';
import { MOVER, defaultConfig, startTestSim } from './fixtures/helpers.js';

const cfg = defaultConfig();
cfg.tokens.unshift(MOVER);
/** The mover's token as older docs described it: without VM.Config.Options. */
const NO_OPTIONS = {
  id: 'kubernetes-csi@pve!nooptions',
  secret: '44444444-3333-4444-5555-666666666666',
  privileges: MOVER.privileges.filter((p) => p !== 'VM.Config.Options'),
};
cfg.tokens.push(NO_OPTIONS);
const csi = cfg.tokens[1] as { id: string; secret: string };
// qmp backend without sockets: volumes get sparse files, nothing is plugged anywhere
const ts = await startTestSim({ config: cfg, backend: 'qmp', qmp: {} });
t.teardown(() => ts.close());
const call: typeof ts.call = (...a) => ts.call(...a);
const callAs: typeof ts.callAs = (...a) => ts.callAs(...a);
const waitTask: typeof ts.waitTask = (...a) => ts.waitTask(...a);
const admin = ts.admin;
const asCsi = `PVEAPIToken=${csi.id}=${csi.secret}`;

interface StateVol {
  volid: string;
  file: string | null;
}
async function volumes(node: string): Promise<StateVol[]> {
  const st = (await admin.state()) as { nodes: Array<{ name: string; storages: Array<{ volumes: StateVol[] }> }> };
  return (st.nodes.find((n) => n.name === node)?.storages ?? []).flatMap((s) => s.volumes);
}
async function vmNode(vmid: number): Promise<string | undefined> {
  const st = (await admin.state()) as { vms: Array<{ vmid: number; node: string }> };
  return st.vms.find((v) => v.vmid === vmid)?.node;
}
async function task(node: string, r: Awaited<ReturnType<typeof call>>) {
  if (r.status !== 200) throw new Error(`${r.status} ${r.text}`);
  const upid = r.body?.data as string;
  const st = await waitTask(node, upid);
  const log = (await call('GET', `/nodes/${node}/tasks/${encodeURIComponent(upid)}/log`, { limit: 500 })).body
    ?.data as Array<{ t: string }>;
  return { upid, exit: st.exitstatus as string, log: log.map((l) => l.t) };
}
async function disk(node: string, name: string, data?: string): Promise<string> {
  const r = await call('POST', `/nodes/${node}/storage/local-lvm/content`, { vmid: 9999, filename: name, size: '8M' });
  t.equal(r.status, 200, `allocated ${name} on ${node}`);
  if (data !== undefined) {
    const file = (await volumes(node)).find((x) => x.volid === `local-lvm:${name}`)?.file;
    if (!file) throw new Error(`no file behind ${name}`);
    await writeFile(file, data, { flag: 'r+' });
  }
  return `local-lvm:${name}`;
}
const helper = (node: string, unused0: string) =>
  call('POST', `/nodes/${node}/qemu`, { vmid: 9999, name: 'pve-nfs-csi-mover', unused0 });
const migrate = (node: string, params: Record<string, string>) =>
  call('POST', `/nodes/${node}/qemu/9999/migrate`, params);
async function release(node: string) {
  t.equal(
    (await call('POST', `/nodes/${node}/qemu/9999/config`, { unused0: 'local-lvm:vm-9999-pve-nfs-csi-released' }))
      .status,
    200,
  );
  t.equal((await task(node, await call('DELETE', `/nodes/${node}/qemu/9999`))).exit, 'OK');
}

t.test('a stopped VM carries its unused disk to another node, bytes and name unchanged', async (t) => {
  const volid = await disk('hyper1', 'vm-9999-pvc-mig1', 'hello from hyper1');
  const created = await task('hyper1', await helper('hyper1', volid));
  t.match(created.upid, /:qmcreate:9999:kubernetes-csi@pve!mover:$/);
  t.equal(created.exit, 'OK');
  const m = await task('hyper1', await migrate('hyper1', { target: 'hyper2' }));
  t.match(m.upid, /^UPID:hyper1:.*:qmigrate:9999:/);
  t.equal(m.exit, 'OK');
  t.match(m.log.join('\n'), /starting migration of VM 9999 to node 'hyper2'/);
  t.match(m.log.join('\n'), /found local disk 'local-lvm:vm-9999-pvc-mig1' \(unused\)/);
  t.match(m.log.join('\n'), /volume 'local-lvm:vm-9999-pvc-mig1' is 'local-lvm:vm-9999-pvc-mig1' on the target/);
  t.match(m.log.at(-2), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d migration finished successfully \(duration \d\d:\d\d:\d\d\)$/);
  t.equal(await vmNode(9999), 'hyper2');
  const conf = (await call('GET', '/nodes/hyper2/qemu/9999/config')).body?.data as Record<string, string>;
  t.equal(conf.unused0, volid);
  t.notOk(conf.lock, 'the migrate lock is gone');
  const gone = await call('GET', '/nodes/hyper1/qemu/9999/config');
  t.equal(gone.body?.message, "Configuration file 'nodes/hyper1/qemu-server/9999.conf' does not exist\n");
  t.notOk(
    (await volumes('hyper1')).some((v) => v.volid === volid),
    'source copy freed by the migration',
  );
  const copy = (await volumes('hyper2')).find((v) => v.volid === volid);
  t.equal((await readFile(copy?.file ?? '/nonexistent')).subarray(0, 17).toString(), 'hello from hyper1');
  // releasing the disk without freeing it: overwrite unusedN, then destroy the helper
  await release('hyper2');
  t.equal(await vmNode(9999), undefined);
  t.ok(
    (await volumes('hyper2')).some((v) => v.volid === volid),
    'the disk survives the helper',
  );
  await call('DELETE', `/nodes/hyper2/storage/local-lvm/content/${volid}`);
});

t.test('resourcesLagMs: the VM list trails a migration, the config on the old node is gone at once', async (t) => {
  const volid = await disk('hyper1', 'vm-9999-pvc-lag');
  await task('hyper1', await helper('hyper1', volid));
  await admin.patchFaults({ resourcesLagMs: 400 });
  t.equal((await task('hyper1', await migrate('hyper1', { target: 'hyper2' }))).exit, 'OK');
  const listed = async () =>
    (
      (await call('GET', '/cluster/resources', { type: 'vm' })).body?.data as Array<{ vmid: number; node: string }>
    ).find((v) => v.vmid === 9999)?.node;
  t.equal(await listed(), 'hyper1', 'listed on the old node for a while');
  t.equal((await call('GET', '/nodes/hyper1/qemu/9999/config')).status, 500, 'while its config is only on the new one');
  await new Promise((r) => setTimeout(r, 450));
  t.equal(await listed(), 'hyper2');
  await admin.patchFaults({ resourcesLagMs: 0 });
  await release('hyper2');
  await call('DELETE', `/nodes/hyper2/storage/local-lvm/content/${volid}`);
});

t.test('preconditions answer before any task, as migrate_vm does', async (t) => {
  const volid = await disk('hyper1', 'vm-9999-pvc-pre');
  await task('hyper1', await helper('hyper1', volid));
  const again = await helper('hyper3', volid);
  t.equal(again.body?.message, "unable to create VM 9999 - VM 9999 already exists on node 'hyper1'\n");
  t.same((await migrate('hyper1', { target: 'hyper1' })).body?.errors, { target: 'target is local node.' });
  t.equal((await migrate('hyper1', { target: 'hyper9' })).body?.message, "no such cluster node 'hyper9'\n");
  t.same((await migrate('hyper1', { target: 'hyper2', force: '1' })).body?.errors, {
    force: 'Only root may use this option.',
  });
  t.equal(
    (await migrate('hyper1', { target: 'hyper2', targetstorage: 'nope' })).body?.message,
    "storage 'nope' does not exist\n",
  );
  t.equal(
    (await migrate('hyper3', { target: 'hyper2' })).body?.message,
    "Configuration file 'nodes/hyper3/qemu-server/9999.conf' does not exist\n",
  );
  await admin.patchVm(9999, { lock: 'backup' });
  t.equal((await migrate('hyper1', { target: 'hyper2' })).body?.message, 'VM is locked (backup)\n');
  await admin.patchVm(9999, { lock: null });
  const running = await call('POST', '/nodes/hyper1/qemu/101/migrate', { target: 'hyper2' });
  t.equal(running.body?.message, "can't migrate running VM without --online\n");
  const noPriv = await callAs(asCsi, 'POST', '/nodes/hyper1/qemu/9999/migrate', { target: 'hyper2' });
  t.equal(noPriv.status, 403);
  t.equal(noPriv.statusText, 'Permission check failed (/vms/9999, VM.Migrate)');
  const noAlloc = await callAs(asCsi, 'POST', '/nodes/hyper1/qemu', { vmid: 9998 });
  t.equal(noAlloc.statusText, 'Permission check failed', 'create_vm raises without naming the path');
  await release('hyper1');
  await call('DELETE', `/nodes/hyper1/storage/local-lvm/content/${volid}`);
});

t.test('a disk the VM does not own stops the migration in its scan', async (t) => {
  await task('hyper1', await helper('hyper1', 'local-lvm:vm-101-disk-0'));
  const m = await task('hyper1', await migrate('hyper1', { target: 'hyper2' }));
  t.equal(m.exit, 'migration aborted');
  t.match(m.log.join('\n'), /can't migrate local disk 'local-lvm:vm-101-disk-0': owned by other VM \(owner = VM 101\)/);
  t.match(
    m.log.join('\n'),
    /ERROR: migration aborted \(duration .*\): Problem found while scanning volumes - can't migrate VM - check log/,
  );
  t.equal(await vmNode(9999), 'hyper1');
  const conf = (await call('GET', '/nodes/hyper1/qemu/9999/config')).body?.data as Record<string, string>;
  t.notOk(conf.lock, 'phase1 cleanup removed the lock');
  // a foreign volume is dropped from the config on destroy, never freed
  t.equal((await task('hyper1', await call('DELETE', '/nodes/hyper1/qemu/9999'))).exit, 'OK');
  t.ok((await volumes('hyper1')).some((v) => v.volid === 'local-lvm:vm-101-disk-0'));
});

t.test('a name taken on the target is imported under a free vm-<vmid>-disk-N', async (t) => {
  const volid = await disk('hyper1', 'vm-9999-pvc-dup', 'source bytes');
  await disk('hyper2', 'vm-9999-pvc-dup', 'other bytes');
  await task('hyper1', await helper('hyper1', volid));
  const m = await task('hyper1', await migrate('hyper1', { target: 'hyper2' }));
  t.equal(m.exit, 'OK');
  t.match(m.log.join('\n'), /volume pve\/vm-9999-pvc-dup already exists - importing with a different name/);
  t.match(m.log.join('\n'), /volume 'local-lvm:vm-9999-pvc-dup' is 'local-lvm:vm-9999-disk-0' on the target/);
  const conf = (await call('GET', '/nodes/hyper2/qemu/9999/config')).body?.data as Record<string, string>;
  t.equal(conf.unused0, 'local-lvm:vm-9999-disk-0', 'the config follows the new name');
  const renamed = (await volumes('hyper2')).find((v) => v.volid === 'local-lvm:vm-9999-disk-0');
  t.equal((await readFile(renamed?.file ?? '/nonexistent')).subarray(0, 12).toString(), 'source bytes');
  await release('hyper2');
  for (const v of ['vm-9999-pvc-dup', 'vm-9999-disk-0'])
    await call('DELETE', `/nodes/hyper2/storage/local-lvm/content/local-lvm:${v}`);
});

t.test('faults: a broken copy leaves everything on the source; a failed source free leaves two copies', async (t) => {
  const volid = await disk('hyper1', 'vm-9999-pvc-flt', 'keep me');
  await task('hyper1', await helper('hyper1', volid));
  await admin.patchFaults({ migrateFail: 'copy' });
  const broken = await task('hyper1', await migrate('hyper1', { target: 'hyper2' }));
  t.equal(broken.exit, 'migration aborted');
  t.match(
    broken.log.join('\n'),
    /storage migration for 'local-lvm:vm-9999-pvc-flt' to storage 'local-lvm' failed - command .* failed: exit code 255/,
  );
  t.equal(await vmNode(9999), 'hyper1');
  t.notOk(
    (await volumes('hyper2')).some((v) => v.volid === volid),
    'the partial copy is freed',
  );
  const src = (await volumes('hyper1')).find((v) => v.volid === volid);
  t.equal((await readFile(src?.file ?? '/nonexistent')).subarray(0, 7).toString(), 'keep me');

  await admin.patchFaults({ migrateFail: 'cleanup' });
  const problems = await task('hyper1', await migrate('hyper1', { target: 'hyper2' }));
  t.equal(problems.exit, 'migration problems');
  t.match(problems.log.join('\n'), /ERROR: removing local copy of 'local-lvm:vm-9999-pvc-flt' failed - lvremove/);
  t.equal(await vmNode(9999), 'hyper2', 'the VM moved anyway');
  t.ok(
    (await volumes('hyper1')).some((v) => v.volid === volid),
    'source copy left behind',
  );
  t.ok(
    (await volumes('hyper2')).some((v) => v.volid === volid),
    'target copy in place',
  );
  await admin.patchFaults({ migrateFail: 'off' });
  await release('hyper2');
  await call('DELETE', `/nodes/hyper1/storage/local-lvm/content/${volid}`);
  await call('DELETE', `/nodes/hyper2/storage/local-lvm/content/${volid}`);
});

t.test('create_vm: name and description need VM.Config.Options ($check_vm_modify_config_perm)', async (t) => {
  const as = `PVEAPIToken=${NO_OPTIONS.id}=${NO_OPTIONS.secret}`;
  const named = await callAs(as, 'POST', '/nodes/hyper1/qemu', { vmid: 9996, name: 'pve-nfs-csi-mover' });
  t.equal(named.status, 403);
  t.equal(named.statusText, 'Permission check failed (/vms/9996, VM.Config.Options)');
  const described = await callAs(as, 'POST', '/nodes/hyper1/qemu', { vmid: 9996, description: 'x' });
  t.equal(described.statusText, 'Permission check failed (/vms/9996, VM.Config.Options)');
  const scsihw = await callAs(as, 'POST', '/nodes/hyper1/qemu', { vmid: 9996, scsihw: 'virtio-scsi-pci' });
  t.equal(scsihw.statusText, 'Permission check failed (/vms/9996, VM.Config.HWType)', 'scsihw is a hardware option');
  const bare = await callAs(as, 'POST', '/nodes/hyper1/qemu', { vmid: 9996 });
  t.equal(bare.status, 200, 'VM.Allocate alone creates a VM without options');
  // a token sees only its own tasks: wait as the one that made it
  const upid = encodeURIComponent(bare.body?.data as string);
  for (;;) {
    const st = await callAs(as, 'GET', `/nodes/hyper1/tasks/${upid}/status`);
    if ((st.body?.data as { status?: string } | undefined)?.status === 'stopped') break;
    await new Promise((res) => setTimeout(res, 10));
  }
  await waitTask('hyper1', (await call('DELETE', '/nodes/hyper1/qemu/9996')).body?.data as string);
  const withMover = await callAs(`PVEAPIToken=${MOVER.id}=${MOVER.secret}`, 'POST', '/nodes/hyper1/qemu', {
    vmid: 9996,
    name: 'pve-nfs-csi-mover',
    description: 'x',
  });
  t.equal(withMover.status, 200, "move's token has it");
  await waitTask('hyper1', withMover.body?.data as string);
  await waitTask('hyper1', (await call('DELETE', '/nodes/hyper1/qemu/9996')).body?.data as string);
});
