// `pve-nfs-csi report` against a real kube-apiserver, the Proxmox simulator and ganesha: a healthy
// cluster reports nothing (exit 0); each leftover kind is detected; --fix without --yes changes
// nothing; --fix --yes removes exactly the provable leftovers, and a live claim, an in-flight
// disk and directory, a directory whose name proves no claim, a disk with a pending change and
// everything attached survive (the ownership cases themselves: ownership.test.ts).
import crypto from 'node:crypto';
import t from 'tap';
import { waitTask } from '../../../src/proxmox/api/tasks.js';
import { helperWwnForSlot, wwnForSlot } from '../../../src/proxmox/contract.js';
import { startCliEnv } from './env.js';

const env = await startCliEnv();
t.teardown(() => env.stop(t.passing()));
const kube = env.cluster.kube;
const GiB = 1024 ** 3;
// Long enough that the in-flight items stay younger than it through every run below on a loaded machine.
const GRACE_S = 25;
const REGION = 'homelab';
const SHARE = env.talos.share;

const pvcName = () => `pvc-${crypto.randomUUID()}`;
async function disk(node: string, pv: string): Promise<string> {
  const name = `vm-9999-${pv}`;
  // After an idle pause the first request may meet a keep-alive connection the server closed.
  await env.api
    .allocDisk(node, 'local-lvm', { vmid: 9999, filename: name, sizeBytes: GiB })
    .catch(() => env.api.allocDisk(node, 'local-lvm', { vmid: 9999, filename: name, sizeBytes: GiB }));
  return name;
}
async function config(node: string, vmid: number, change: { set?: Record<string, string>; delete?: string[] }) {
  const upid = await env.api.updateVmConfig(node, vmid, change);
  if (upid) await waitTask(env.api, node, upid, { cluster: REGION, what: 'config' }).catch(() => undefined);
}
const drive = (name: string, wwn: string) => `local-lvm:${name},backup=0,iothread=1,wwn=${wwn}`;
const proxmoxPv = (name: string, zone: string, diskName: string) =>
  env.createPv(name, {
    accessMode: 'ReadWriteOnce',
    reclaimPolicy: 'Delete',
    storageClassName: 'proxmox-local',
    csi: {
      driver: 'csi.proxmox.sinextra.dev',
      volumeHandle: `${REGION}/${zone}/local-lvm/${diskName}`,
      fsType: 'ext4',
    },
  });
const nfsPv = (name: string, subDir: string) =>
  env.createPv(name, {
    accessMode: 'ReadWriteMany',
    reclaimPolicy: 'Delete',
    storageClassName: 'syno-nfs-csi',
    csi: { driver: 'nfs.csi.k8s.io', volumeHandle: `${env.nfsServer}#${SHARE.replace(/^\//, '')}#${subDir}#${name}#` },
  });
async function attachment(pv: string, node: string) {
  await kube.create('/apis/storage.k8s.io/v1/volumeattachments', {
    metadata: {
      name: `csi-${crypto
        .createHash('sha256')
        .update(pv + node)
        .digest('hex')
        .slice(0, 20)}`,
    },
    spec: { attacher: 'csi.proxmox.sinextra.dev', nodeName: node, source: { persistentVolumeName: pv } },
  });
}
const disks = async (node: string) => (await env.api.listContent(node, 'local-lvm', 9999)).map((d) => d.volid).sort();
const vmConfig = async (node: string, vmid: number) => (await env.api.vmConfig(node, vmid)).values;
const pending = async (node: string, vmid: number) => await env.api.vmPending(node, vmid);
const { exists, mkdir } = env;
const report = (...args: string[]) => env.run(['report', ...env.baseArgs, '--grace', `${GRACE_S}s`, ...args]);
const json = (out: string) =>
  JSON.parse(out) as {
    ok: boolean;
    fix: string;
    findings: Array<{
      kind: string;
      where: string;
      what: string;
      detail: string;
      action?: { type: string };
      kept?: string;
      result?: string;
      ageMs?: number;
      sizeBytes?: number;
    }>;
  };

// The seed's classes: proxmox-local and the NFS class with <namespace>/<pvc> directories.
await kube.create('/apis/storage.k8s.io/v1/storageclasses', {
  metadata: { name: 'proxmox-local' },
  provisioner: 'csi.proxmox.sinextra.dev',
  parameters: { storage: 'local-lvm' },
});
await env.createNfsClass('delete');

// A healthy volume of each driver: disk + PV + attachment + VolumeAttachment; directory + PV.
const live = pvcName();
const liveDisk = await disk('hyper1', live);
await proxmoxPv(live, 'hyper1', liveDisk);
await config('hyper1', 111, { set: { scsi1: drive(liveDisk, wwnForSlot(1)) } });
await attachment(live, 'talos-worker-1');
mkdir('apps/data', { 'db.sqlite': 4096 });
await nfsPv(pvcName(), 'apps/data');

await t.test('a healthy cluster: nothing to report, exit 0', async (t) => {
  const r = await report();
  t.equal(r.code, 0, r.out + r.err);
  t.match(r.out, /nothing to report/);
  const j = await report('--json');
  t.equal(j.code, 0);
  t.same(json(j.out), { ok: true, fix: 'off', findings: [], privileges: [{ region: REGION, missing: [] }] });
});

await t.test('--yes without --fix is bad usage; --help documents the exit codes', async (t) => {
  const r = await report('--yes');
  t.equal(r.code, 2);
  t.match(r.err, /--yes only goes with --fix/);
  const h = await env.run(['report', '--help']);
  t.equal(h.code, 0);
  t.match(h.out, /Exit codes: 0 nothing to do/);
});

// Leftovers that are old enough to be removable, then (after the grace period) fresh ones.
let orphanDisk: string,
  stuckDisk: string,
  strayDisk: string,
  unusedDisk: string,
  helperDisk: string,
  gone: string,
  notOurs: string,
  freshDisk: string;
await t.test('leftovers of every kind are made', async (t) => {
  const orphan = pvcName();
  orphanDisk = await disk('hyper1', orphan);
  const stuck = pvcName(); // no PV, its detach pending on VM 112
  stuckDisk = await disk('hyper2', stuck);
  await config('hyper2', 112, { set: { scsi1: drive(stuckDisk, wwnForSlot(1)) } });
  await env.sim.patchFaults({ detachPending: 'silent', detachPendingVmids: [112] });
  await env.api.unlinkDisks('hyper2', 112, ['scsi1']);
  await env.sim.patchFaults({ detachPending: 'off', detachPendingVmids: [] });
  const stray = pvcName(); // attached to VM 113 without a VolumeAttachment
  strayDisk = await disk('hyper3', stray);
  await proxmoxPv(stray, 'hyper3', strayDisk);
  await config('hyper3', 113, { set: { scsi1: drive(strayDisk, wwnForSlot(1)) } });
  const unused = pvcName(); // its PV exists; VM 101 has an unusedN entry of it
  unusedDisk = await disk('hyper1', unused);
  await proxmoxPv(unused, 'hyper1', unusedDisk);
  await config('hyper1', 101, { set: { unused0: `local-lvm:${unusedDisk}` } });
  const helper = pvcName(); // a helper attachment left by an offline expansion
  helperDisk = await disk('hyper1', helper);
  await proxmoxPv(helper, 'hyper1', helperDisk);
  await config('hyper1', 111, { set: { scsi2: drive(helperDisk, helperWwnForSlot(2)) } });
  gone = pvcName();
  await proxmoxPv(gone, 'hyper2', `vm-9999-${gone}`);
  notOurs = await disk('hyper2', 'scratch'); // vm-9999-scratch: the scheme's prefix, not a provisioned name
  mkdir('apps/old', { f: 100 });
  await nfsPv(pvcName(), 'apps/missing');
  mkdir('archived-apps/x-20250101T000000Z', { a: 1000 });
  mkdir('archived-apps/y', { 'sub/b': 2000 });
  await new Promise((r) => setTimeout(r, (GRACE_S + 0.5) * 1000));
  const fresh = pvcName(); // a CreateVolume in flight: disk and directory, no PV yet
  freshDisk = await disk('hyper1', fresh);
  mkdir('apps/new');
  t.pass('made');
});

await t.test('each leftover kind is detected; --fix without --yes changes nothing', async (t) => {
  const before = {
    h1: await disks('hyper1'),
    h2: await disks('hyper2'),
    c101: await pending('hyper1', 101),
    c111: await pending('hyper1', 111),
  };
  const r = await report('--fix', '--json');
  t.equal(r.code, 1, r.err);
  const { findings, fix } = json(r.out);
  t.equal(fix, 'dry-run');
  const find = (kind: string, what: RegExp) => findings.find((f) => f.kind === kind && what.test(f.what));
  t.ok(find('orphan-disk', new RegExp(orphanDisk))?.action, 'old orphan: removable');
  t.match(find('orphan-disk', new RegExp(freshDisk))?.kept, /grace period/, 'in-flight disk: kept');
  t.match(
    find('orphan-disk', new RegExp(stuckDisk))?.kept,
    /still referenced: detaching as scsi1 of VM talos-worker-2/,
    'pending-delete disk: kept',
  );
  t.match(find('orphan-disk', new RegExp(notOurs))?.kept, /not a provisioned name/);
  t.ok(find('pending-delete', new RegExp(stuckDisk)), 'pending delete reported');
  t.match(find('attached-without-attachment', new RegExp(strayDisk))?.where, /talos-worker-3/);
  t.equal(find('attached-without-attachment', new RegExp(strayDisk))?.action, undefined);
  t.equal(find('unused-entry', new RegExp(unusedDisk))?.action?.type, 'drop-unused');
  t.equal(find('helper-attachment', new RegExp(helperDisk))?.action?.type, 'unlink-helpers');
  t.ok(find('pv-missing-disk', new RegExp(gone)));
  // <namespace>/<pvc> names prove no claim (docs/ownership-day2.md): reported, never removed.
  t.match(find('orphan-dir', /^apps\/old$/)?.kept, /does not prove a provisioned claim/, 'old directory: kept');
  t.match(find('orphan-dir', /^apps\/new$/)?.kept, /does not prove a provisioned claim/, 'in-flight directory: kept');
  t.ok(find('pv-missing-dir', /PV pvc-/));
  const x = find('archive', /x-20250101T000000Z/);
  t.ok(
    x && (x.ageMs ?? 0) > 300 * 86400e3 && x.sizeBytes === 1000,
    'our archive: age from its name, size of its files',
  );
  const y = find('archive', /archived-apps\/y$/);
  t.ok(
    y && (y.ageMs ?? Infinity) < 600e3 && y.sizeBytes === 2000,
    'upstream-named archive: age from the directory, size',
  );
  t.notOk(
    findings.some((f) => f.what.includes(liveDisk) || f.what === 'apps/data'),
    'the live volumes are not mentioned',
  );
  t.same(await disks('hyper1'), before.h1, 'no disk changed');
  t.same(await disks('hyper2'), before.h2);
  t.same(await pending('hyper1', 101), before.c101, 'no config changed');
  t.same(await pending('hyper1', 111), before.c111);
  t.ok(exists('apps/old'), 'no directory removed');
  const text = await report('--fix');
  t.match(text.out, /would remove/);
  t.match(text.out, /run again with --fix --yes/);
});

await t.test(
  'a token without the privileges: report says what is missing (exit 3); --fix --yes refuses (exit 4) and changes nothing',
  async (t) => {
    const args = env.baseArgs.map((a) => (a === env.config ? env.auditorConfig : a));
    const before = { h1: await disks('hyper1'), c111: await pending('hyper1', 111) };
    const r = await env.run(['report', ...args, '--grace', `${GRACE_S}s`]);
    t.equal(r.code, 3, r.err);
    t.match(r.out, /proxmox\/homelab: the credentials lack VM\.Config\.Disk on \/vms\/9999/);
    const fix = await env.run(['report', ...args, '--grace', `${GRACE_S}s`, '--fix', '--yes']);
    t.equal(fix.code, 4, fix.out + fix.err);
    t.match(fix.err, /--fix refused: the Proxmox credentials of homelab lack privileges/);
    t.match(fix.out, /Datastore\.Allocate on \/storage \(free orphaned disks\)/);
    t.same(await disks('hyper1'), before.h1, 'no disk freed');
    t.same(await pending('hyper1', 111), before.c111, 'no config changed');
    t.ok(exists('apps/old'), 'no directory removed');
  },
);

await t.test('--fix --yes removes exactly the provable leftovers', async (t) => {
  const r = await report('--fix', '--yes', '--json');
  t.equal(r.code, 1, `findings remain (pending delete, stray attachment, missing disk): ${r.err}`);
  const { findings, fix } = json(r.out);
  t.equal(fix, 'applied');
  const done = findings
    .filter((f) => f.result?.startsWith('done'))
    .map((f) => `${f.kind} ${f.what}`)
    .sort();
  t.equal(done.length, 3, done.join('\n'));
  t.notOk(
    findings.some((f) => f.result?.startsWith('failed')),
    JSON.stringify(findings.filter((f) => f.result?.startsWith('failed'))),
  );
  const h1 = await disks('hyper1');
  t.notOk(h1.includes(`local-lvm:${orphanDisk}`), 'the orphan is freed');
  for (const d of [liveDisk, freshDisk, unusedDisk, helperDisk]) t.ok(h1.includes(`local-lvm:${d}`), `${d} survives`);
  t.ok((await disks('hyper2')).includes(`local-lvm:${stuckDisk}`), 'the disk with a pending delete survives');
  t.ok((await disks('hyper2')).includes(`local-lvm:${notOurs}`), 'a disk not named by the provisioner survives');
  t.ok((await disks('hyper3')).includes(`local-lvm:${strayDisk}`));
  const c111 = await vmConfig('hyper1', 111);
  t.match(c111.scsi1, liveDisk, 'the live attachment stays');
  t.notOk(c111.scsi2, 'the helper attachment is unlinked');
  t.notOk(
    Object.values(await vmConfig('hyper1', 101)).some((v) => v.includes(unusedDisk)),
    'the unusedN entry is gone',
  );
  t.ok(
    (await pending('hyper2', 112)).some((e) => e.key === 'scsi1' && e.pendingDelete),
    'the pending delete is untouched',
  );
  t.match((await vmConfig('hyper3', 113)).scsi1, strayDisk, 'the stray attachment stays');
  t.ok(exists('apps/old'), 'a <namespace>/<pvc> directory without a PV is not provably a leftover: kept');
  t.ok(exists('apps/data/db.sqlite') && exists('apps/new'), 'the live claim and the in-flight directory survive');
  t.ok(
    exists('archived-apps/y/sub/b') && exists('archived-apps/x-20250101T000000Z/a'),
    "archives are not report's to remove",
  );

  const again = await report('--fix', '--json');
  const left = json(again.out)
    .findings.filter((f) => f.action)
    .map((f) => `${f.kind} ${f.what}`);
  t.same(left, [], 'nothing removable is left (until the in-flight items pass the grace period)');
});
