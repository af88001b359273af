// Offline migration of a linked clone and of a VM with a snapshot (docs/simulator.md, "Offline
// migration"): QemuMigrate refuses a volume a snapshot section references on LVM-thin
// (`non-migratable snapshot exists`), and takes an LVM-thin linked clone like any volume (its
// name has no base part, so the `clone of` refusal does not apply): a full copy of its bytes.

import { readFile, writeFile } from 'node:fs/promises';
import t from 'tap';
import { MOVER, defaultConfig, startTestSim } from './fixtures/helpers.js';

const cfg = defaultConfig();
cfg.tokens.unshift({ ...MOVER, privileges: [...MOVER.privileges, 'VM.Snapshot', 'VM.Clone'] });
const ts = await startTestSim({ config: cfg, backend: 'qmp', qmp: {} });
t.teardown(() => ts.close());
const call: typeof ts.call = (...a) => ts.call(...a);

interface StateVol {
  volid: string;
  file: string | null;
}
async function volumes(node: string): Promise<StateVol[]> {
  const st = (await ts.admin.state()) as { nodes: Array<{ name: string; storages: Array<{ volumes: StateVol[] }> }> };
  return (st.nodes.find((n) => n.name === node)?.storages ?? []).flatMap((s) => s.volumes);
}
async function task(node: string, r: Awaited<ReturnType<typeof call>>) {
  if (r.status !== 200) throw new Error(`${r.status} ${r.text}`);
  const upid = r.body?.data as string;
  const st = await ts.waitTask(node, upid);
  const log = (await call('GET', `/nodes/${node}/tasks/${encodeURIComponent(upid)}/log`, { limit: 500 })).body
    ?.data as Array<{ t: string }>;
  return { exit: st.exitstatus as string, log: log.map((l) => l.t) };
}
const fileOf = async (node: string, volid: string) =>
  (await volumes(node)).find((v) => v.volid === volid)?.file ?? '/nonexistent';

t.test('a VM with a snapshot is refused; its linked clone migrates as a full copy', async (t) => {
  const volid = 'local-lvm:vm-9999-pvc-snapped';
  const alloc = await call('POST', '/nodes/hyper1/storage/local-lvm/content', {
    vmid: 9999,
    filename: 'vm-9999-pvc-snapped',
    size: '8M',
  });
  t.equal(alloc.status, 200);
  await writeFile(await fileOf('hyper1', volid), 'bytes of snapshot time', { flag: 'r+' });
  t.equal((await task('hyper1', await call('POST', '/nodes/hyper1/qemu', { vmid: 9999 }))).exit, 'OK');
  t.equal((await task('hyper1', await call('POST', '/nodes/hyper1/qemu/9999/config', { scsi0: volid }))).exit, 'OK');
  t.equal(
    (await task('hyper1', await call('POST', '/nodes/hyper1/qemu/9999/snapshot', { snapname: 's1' }))).exit,
    'OK',
  );
  const cloned = await call('POST', '/nodes/hyper1/qemu/9999/clone', { newid: 501, snapname: 's1', full: 0 });
  t.equal((await task('hyper1', cloned)).exit, 'OK');
  await writeFile(await fileOf('hyper1', volid), 'BYTES WRITTEN AFTERWARDS', { flag: 'r+' });

  const refused = await task('hyper1', await call('POST', '/nodes/hyper1/qemu/9999/migrate', { target: 'hyper2' }));
  t.equal(refused.exit, 'migration aborted');
  t.match(
    refused.log.join('\n'),
    /can't migrate local disk 'local-lvm:vm-9999-pvc-snapped': non-migratable snapshot exists/,
  );
  t.ok(
    (await volumes('hyper1')).some((v) => v.volid === volid),
    'nothing moved',
  );

  const clone = 'local-lvm:vm-501-disk-0';
  const m = await task('hyper1', await call('POST', '/nodes/hyper1/qemu/501/migrate', { target: 'hyper2' }));
  t.equal(m.exit, 'OK');
  t.match(m.log.join('\n'), /found local disk 'local-lvm:vm-501-disk-0' \(attached\)/);
  t.notOk(
    (await volumes('hyper1')).some((v) => v.volid === clone),
    'the clone is freed on the source',
  );
  const copy = await readFile(await fileOf('hyper2', clone));
  t.equal(copy.subarray(0, 22).toString(), 'bytes of snapshot time', 'the copy holds the bytes of the snapshot');
  const source = await readFile(await fileOf('hyper1', volid));
  t.equal(source.subarray(0, 24).toString(), 'BYTES WRITTEN AFTERWARDS', 'and the source its own');
});
