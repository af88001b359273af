// VM snapshots, linked clones from a snapshot and disk reassignment, as a non-root token makes a
// thin copy of one disk that outlives it (docs/snapshots.md, "Proxmox: design"): a temporary VM
// holding only the disk is snapshotted, cloned with full=0, the clone's disk is reassigned to
// a VM with the controller VMID (vm-9999-disk-N), and the source is freed with its snap_ LVs.

import { readFile, writeFile } from 'node:fs/promises';
import t from 'tap';
import { defaultConfig, startTestSim } from './fixtures/helpers.js';

const SNAP = {
  id: 'kubernetes-csi@pve!snap',
  secret: '33333333-3333-4444-5555-666666666666',
  privileges: [
    'VM.Audit',
    'VM.Config.Disk',
    'VM.Allocate',
    'VM.Config.Options',
    'VM.Snapshot',
    'VM.Clone',
    'Datastore.AllocateSpace',
    'Datastore.Allocate',
    'Datastore.Audit',
  ],
};
const cfg = defaultConfig();
cfg.tokens.unshift(SNAP);
const ts = await startTestSim({ config: cfg, backend: 'qmp', qmp: {} });
t.teardown(() => ts.close());
const { call, callAs, admin } = ts;
const asCsi = (() => {
  const csi = cfg.tokens[1] as { id: string; secret: string };
  return `PVEAPIToken=${csi.id}=${csi.secret}`;
})();

interface StateVol {
  volid: string;
  file: string | null;
  owner: number;
  snapshots: Array<{ name: string; file: string | null }>;
}
async function vols(): Promise<StateVol[]> {
  const st = (await admin.state()) as { nodes: Array<{ name: string; storages: Array<{ volumes: StateVol[] }> }> };
  return (st.nodes.find((n) => n.name === 'hyper1')?.storages ?? []).flatMap((s) => s.volumes);
}
async function vol(volid: string): Promise<StateVol | undefined> {
  return (await vols()).find((v) => v.volid === volid);
}
async function task(r: Awaited<ReturnType<typeof call>>) {
  if (r.status !== 200) throw new Error(`${r.status} ${r.text}`);
  const upid = r.body?.data as string;
  const st = await ts.waitTask('hyper1', upid);
  const log = (await call('GET', `/nodes/hyper1/tasks/${encodeURIComponent(upid)}/log`, { limit: 500 })).body
    ?.data as Array<{ t: string }>;
  return { upid, exit: st.exitstatus as string, log: log.map((l) => l.t) };
}
async function config(vmid: number): Promise<Record<string, unknown>> {
  return (await call('GET', `/nodes/hyper1/qemu/${vmid}/config`)).body?.data as Record<string, unknown>;
}
async function disk(name: string, data: string): Promise<string> {
  const r = await call('POST', '/nodes/hyper1/storage/local-lvm/content', { vmid: 9999, filename: name, size: '4M' });
  t.equal(r.status, 200, r.text);
  const file = (await vol(`local-lvm:${name}`))?.file;
  if (!file) throw new Error(`no file behind ${name}`);
  await writeFile(file, data, { flag: 'r+' });
  return `local-lvm:${name}`;
}
const head = async (file: string | null | undefined, n: number) =>
  (await readFile(file ?? '')).subarray(0, n).toString();
const createVm = (vmid: number, name: string) => call('POST', '/nodes/hyper1/qemu', { vmid, name });

t.test(
  'a snapshot of a temporary VM, a linked clone and a reassign make a copy that outlives its source',
  async (t) => {
    const src = await disk('vm-9999-pvc-snapsrc', 'data at snapshot time');
    t.equal((await task(await createVm(5001, 'pve-nfs-csi-snap-t'))).exit, 'OK');
    t.equal((await call('PUT', '/nodes/hyper1/qemu/5001/config', { scsi0: src })).status, 200);

    const snap = await task(await call('POST', '/nodes/hyper1/qemu/5001/snapshot', { snapname: 's1' }));
    t.equal(snap.exit, 'OK');
    t.match(snap.upid, /:qmsnapshot:5001:/);
    t.ok(snap.log.includes(`snapshotting 'drive-scsi0' (${src})`), snap.log.join('\n'));
    t.ok(snap.log.includes('  Logical volume "snap_vm-9999-pvc-snapsrc_s1" created.'));
    t.same(
      (await vol(src))?.snapshots.map((s) => s.name),
      ['s1'],
    );
    t.equal((await config(5001)).parent, 's1');
    const srcFile = (await vol(src))?.file ?? '';
    await writeFile(srcFile, 'DATA AFTER SNAPSHOT!!', { flag: 'r+' });

    const linkedCurrent = await call('POST', '/nodes/hyper1/qemu/5001/clone', { newid: 5002, full: 0 });
    t.equal(linkedCurrent.status, 500);
    t.match(
      linkedCurrent.body?.message,
      /Linked clone feature is not supported for 'local-lvm:vm-9999-pvc-snapsrc' \(scsi0\)/,
    );

    const clone = await task(
      await call('POST', '/nodes/hyper1/qemu/5001/clone', { newid: 5002, snapname: 's1', full: 0 }),
    );
    t.equal(clone.exit, 'OK', clone.log.join('\n'));
    t.ok(clone.log.includes(`create linked clone of drive scsi0 (${src})`));
    const c = await config(5002);
    t.match(c.scsi0, /^local-lvm:vm-5002-disk-0(,|$)/);
    t.equal(c.name, 'Copy-of-VM-pve-nfs-csi-snap-t');
    t.notOk(c.parent, 'no snapshot keys copied');
    t.equal(await head((await vol('local-lvm:vm-5002-disk-0'))?.file, 21), 'data at snapshot time');

    const del = await task(await call('DELETE', '/nodes/hyper1/qemu/5001/snapshot/s1'));
    t.equal(del.exit, 'OK');
    t.same((await vol(src))?.snapshots, []);
    const tconf = await config(5001);
    t.equal(tconf.unused0, src, 'add_unused_volume records the volume the deleted snapshot used');
    t.notOk(tconf.parent);

    t.equal((await task(await createVm(9999, 'pve-nfs-csi-mover'))).exit, 'OK');
    const mv = await task(
      await call('POST', '/nodes/hyper1/qemu/5002/move_disk', {
        disk: 'scsi0',
        'target-vmid': 9999,
        'target-disk': 'unused0',
      }),
    );
    t.equal(mv.exit, 'OK', mv.log.join('\n'));
    t.match(mv.upid, /:qmmove:5002-scsi0>9999-unused0:/);
    t.equal((await config(9999)).unused0, 'local-lvm:vm-9999-disk-0');
    t.notOk((await config(5002)).scsi0);
    t.equal(
      (await call('PUT', '/nodes/hyper1/qemu/9999/config', { unused0: 'local-lvm:vm-9999-pve-nfs-csi-released' }))
        .status,
      200,
    );
    for (const vmid of [9999, 5002, 5001])
      t.equal((await task(await call('DELETE', `/nodes/hyper1/qemu/${vmid}`))).exit, 'OK');
    t.ok(await vol(src), 'destroying the temporary VM leaves the disk it does not own');

    t.equal((await task(await call('DELETE', `/nodes/hyper1/storage/local-lvm/content/${src}`))).exit, 'OK');
    t.notOk(await vol(src));
    const copy = await vol('local-lvm:vm-9999-disk-0');
    t.equal(copy?.owner, 9999);
    t.equal(await head(copy?.file, 21), 'data at snapshot time', 'the copy outlives its source, bytes of the snapshot');
  },
);

t.test('freeing a volume removes its snapshots (free_image)', async (t) => {
  const src = await disk('vm-9999-pvc-snapfree', 'x');
  t.equal((await task(await createVm(5011, 'tmp'))).exit, 'OK');
  await call('PUT', '/nodes/hyper1/qemu/5011/config', { scsi0: src });
  t.equal((await task(await call('POST', '/nodes/hyper1/qemu/5011/snapshot', { snapname: 'aa' }))).exit, 'OK');
  const snapFile = (await vol(src))?.snapshots[0]?.file;
  t.ok(snapFile);
  // the disk is not owned by 5011: deleting its drive key only detaches it
  await call('PUT', '/nodes/hyper1/qemu/5011/config', { delete: 'scsi0' });
  t.equal((await task(await call('DELETE', `/nodes/hyper1/storage/local-lvm/content/${src}`))).exit, 'OK');
  t.notOk(await vol(src));
  await t.rejects(readFile(snapFile ?? ''), 'the snap_ LV went with its volume');
  const left = await task(await call('DELETE', '/nodes/hyper1/qemu/5011/snapshot/aa'));
  t.match(left.exit, /Failed to find logical volume "pve\/snap_vm-9999-pvc-snapfree_aa"/);
  // a failed delete leaves `lock: snapshot-delete`, which only root clears (qm unlock): even a
  // forced delete is then refused, and so is destroying the VM
  const forced = await task(await call('DELETE', '/nodes/hyper1/qemu/5011/snapshot/aa', { force: 1 }));
  t.equal(forced.exit, 'VM is locked (snapshot-delete)');
  await admin.patchVm(5011, { lock: null });
  t.equal((await task(await call('DELETE', '/nodes/hyper1/qemu/5011/snapshot/aa', { force: 1 }))).exit, 'WARNINGS: 1');
  t.equal((await task(await call('DELETE', '/nodes/hyper1/qemu/5011'))).exit, 'OK');
});

t.test('what Proxmox refuses', async (t) => {
  const src = await disk('vm-9999-pvc-snaprefuse', 'y');
  t.equal((await task(await createVm(5021, 'tmp'))).exit, 'OK');
  await call('PUT', '/nodes/hyper1/qemu/5021/config', { scsi0: src });
  for (const [snapname, msg] of [
    ['current', "unable to use snapshot name 'current' (reserved name)"],
    ['PENDING', "unable to use snapshot name 'pending' (reserved name)"],
  ] as const) {
    const r = await call('POST', '/nodes/hyper1/qemu/5021/snapshot', { snapname });
    t.equal(r.body?.message, `${msg}\n`);
  }
  const long = await call('POST', '/nodes/hyper1/qemu/5021/snapshot', { snapname: 'a'.repeat(41) });
  t.equal(long.status, 400);
  t.equal(long.body?.errors?.snapname, 'value may only be 40 characters long');
  for (const snapname of ['1abc', 'a']) {
    const bad = await call('POST', '/nodes/hyper1/qemu/5021/snapshot', { snapname });
    t.match(
      bad.body?.errors?.snapname,
      `invalid configuration ID '${snapname}'`,
      'pve-configid: a letter, then one or more',
    );
  }
  const denied = await callAs(asCsi, 'POST', '/nodes/hyper1/qemu/5021/snapshot', { snapname: 'x' });
  t.equal(denied.status, 403);
  t.match(denied.statusText, /VM\.Snapshot/);
  const noClone = await callAs(asCsi, 'POST', '/nodes/hyper1/qemu/5021/clone', { newid: 5022, snapname: 'x', full: 0 });
  t.equal(noClone.status, 403);

  t.equal((await task(await call('POST', '/nodes/hyper1/qemu/5021/snapshot', { snapname: 'ok-1' }))).exit, 'OK');
  const again = await task(await call('POST', '/nodes/hyper1/qemu/5021/snapshot', { snapname: 'ok-1' }));
  t.equal(again.exit, "snapshot name 'ok-1' already used");
  t.equal((await task(await createVm(5023, 'holder'))).exit, 'OK');
  const inUse = await call('POST', '/nodes/hyper1/qemu/5021/move_disk', { disk: 'scsi0', 'target-vmid': 5023 });
  t.equal(inUse.body?.message, "Can't move disk used by a snapshot to another VM\n");
  const noSnap = await call('POST', '/nodes/hyper1/qemu/5021/clone', { newid: 5022, snapname: 'nope', full: 0 });
  t.equal(noSnap.body?.message, "snapshot 'nope' does not exist\n");
  const storage = await call('POST', '/nodes/hyper1/qemu/5021/clone', {
    newid: 5022,
    snapname: 'ok-1',
    full: 0,
    storage: 'local-lvm',
  });
  t.equal(storage.body?.message, "parameter 'storage' not allowed for linked clones\n");
  const full = await task(
    await call('POST', '/nodes/hyper1/qemu/5021/clone', { newid: 5022, snapname: 'ok-1', full: 1 }),
  );
  t.equal(full.exit, 'OK', 'a full clone copies');
  t.match((await config(5022)).scsi0, /^local-lvm:vm-5022-disk-0/);
  for (const vmid of [5022, 5023]) t.equal((await task(await call('DELETE', `/nodes/hyper1/qemu/${vmid}`))).exit, 'OK');
  t.notOk(await vol('local-lvm:vm-5022-disk-0'), 'destroy frees the clone its VM owns');
  t.equal((await task(await call('DELETE', '/nodes/hyper1/qemu/5021/snapshot/ok-1'))).exit, 'OK');
  t.equal((await task(await call('DELETE', '/nodes/hyper1/qemu/5021'))).exit, 'OK');
  t.ok(await vol(src));
});
