// Restores and clones into another zone against the simulator with real bytes (qmp backend
// without sockets: every volume is a sparse file): the thin copy is made on the source's host,
// its volume VM migrates offline with it to the requested host, and lets go of it there
// (docs/snapshots.md, "Into another zone"). The handle names the new zone, the bytes are the
// source's, a retry finds the volume, and what a failed or lost migration leaves is finished
// by the next attempt.
import t from 'tap';
import fs from 'node:fs';
import pino from 'pino';
import type * as T from '../../../src/csi/types.js';
import { capacity, createReq, preferZone, publishReq, zone } from '../../helpers/csi-requests.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import { snapshotSimConfig } from '../../helpers/snapshot-sim-config.js';
import { present } from '../../helpers/present.js';
import { outcome } from '../../helpers/outcome.js';
import type { Teardown } from '../../helpers/teardown.js';

const SIZE = 64 * 1024 * 1024;
const MIGRATE = 'POST /nodes/{node}/qemu/{vmid}/migrate';

async function start(t: Teardown) {
  const s = await startProxmoxOnSim(t, { sim: { config: snapshotSimConfig(), backend: 'qmp', qmp: {} } });
  const state = async () => s.state().catch(async () => s.state());
  const volumesOf = async () =>
    (await state()).nodes.flatMap((n) => n.storages.flatMap((st) => st.volumes.map((v) => ({ ...v, node: n.name }))));
  const fileOf = async (volid: string) =>
    present((await volumesOf()).find((v) => v.volid === volid)?.file, `the file behind ${volid}`);
  const head = async (volid: string, n: number) =>
    fs
      .readFileSync(await fileOf(volid))
      .subarray(0, n)
      .toString();
  const write = async (volid: string, text: string) => fs.writeFileSync(await fileOf(volid), text, { flag: 'r+' });
  const helperVms = async () =>
    (await state()).vms
      .filter((v) => v.name?.startsWith('pve-nfs-csi-'))
      .map((v) => ({ vmid: v.vmid, name: v.name, node: v.node, config: v.config }));
  const migrations = async () =>
    (await s.admin.requests()).entries.filter((e) => e.route === MIGRATE && e.status !== 0).length;
  return { ...s, state, volumesOf, head, write, helperVms, migrations };
}

const volid = (id: string) => {
  const [, , storage, disk] = id.split('/');
  return `${storage}:${disk}`;
};
const kind = async (p: Promise<unknown>) => (await outcome(p)).kind;
const make = (
  name: string,
  source: T.CreateVolumeRequest['volumeContentSource'],
  topology = preferZone('hyper1'),
  bytes = SIZE,
) =>
  createReq(name, {
    capacityRange: capacity(bytes),
    parameters: { storage: 'local-lvm' },
    accessibilityRequirements: topology,
    volumeContentSource: source,
  });
const snapReq = (name: string, sourceVolumeId: string): T.CreateSnapshotRequest => ({
  name,
  sourceVolumeId,
  secrets: {},
  parameters: {},
});

/** A call context whose log lines are kept. */
function loggedCtx() {
  const lines: Array<Record<string, unknown>> = [];
  const log = pino(
    { level: 'info' },
    { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) },
  );
  return { ctx: { log, signal: AbortSignal.timeout(60_000) }, lines };
}
const ctx = () => loggedCtx().ctx;

t.test('a restore into another zone is copied there by an offline migration, and says so', async (t) => {
  const s = await start(t);
  const created = present((await s.c.createVolume(make('pvc-src', null), ctx())).volume, 'source');
  const src = present(created.volumeId, 'source id');
  t.match(src, /^homelab\/hyper1\//);
  await s.write(volid(src), 'bytes at snapshot time');
  const snap = present((await s.c.createSnapshot(snapReq('snapshot-z', src), ctx())).snapshot?.snapshotId, 'snap');
  await s.write(volid(src), 'BYTES AFTER THE SNAPSHOT');

  const req = make('pvc-far', { snapshot: { snapshotId: snap } }, preferZone('hyper2'));
  const { ctx: logged, lines } = loggedCtx();
  const made = present((await s.c.createVolume(req, logged)).volume, 'restored');
  const id = present(made.volumeId, 'id');
  t.match(id, /^homelab\/hyper2\/local-lvm\/vm-8\d{8}-disk-0$/, 'the handle names the new zone');
  t.same(made.accessibleTopology, [zone('hyper2')]);
  t.equal(made.capacityBytes, created.capacityBytes, "the source's size");
  const vol = (await s.volumesOf()).find((v) => v.volid === volid(id));
  t.equal(vol?.node, 'hyper2', 'the disk is on hyper2');
  t.equal(await s.head(volid(id), 22), 'bytes at snapshot time', 'with the bytes of snapshot time');
  t.equal(await s.head(volid(src), 24), 'BYTES AFTER THE SNAPSHOT', 'the source keeps its own');
  const copied = lines.find((l) => l.name === 'pvc-far' && typeof l.seconds === 'number' && l.to === 'hyper2');
  t.ok(copied, 'the copy is logged with its bytes and seconds');
  t.equal(copied?.bytes, Number(created.capacityBytes));
  t.match(
    String(copied?.msg),
    /^snapshot restored into another zone: \d+ bytes copied from hyper1 to hyper2 in \d+\.\d s/,
  );

  const vms = await s.helperVms();
  t.same(
    vms.map((v) => `${v.name ?? ''}@${v.node}`).sort(),
    ['pve-nfs-csi-snapshot@hyper1', 'pve-nfs-csi-volume@hyper2'],
    'the snapshot stays on hyper1; the volume VM is on hyper2; no copy VM',
  );
  const volumeVm = present(
    vms.find((v) => v.name === 'pve-nfs-csi-volume'),
    'volume VM',
  );
  t.notOk(volumeVm.config.scsi0, 'the volume VM let go of its clone there');
  t.match(volumeVm.config.unused0, /-pve-nfs-csi-released-/);
  t.notOk(
    (await s.volumesOf()).some((v) => v.node === 'hyper1' && v.volid === volid(id)),
    'no copy left on hyper1',
  );

  t.equal(await s.migrations(), 1);
  const again = present((await s.c.createVolume(req, ctx())).volume, 'retry');
  t.same([again.volumeId, again.capacityBytes], [id, made.capacityBytes], 'a retry finds it');
  t.equal(await s.migrations(), 1, 'without a second migration');

  const pub = await s.c.controllerPublishVolume(publishReq(id, 'talos-worker-2'), ctx());
  t.ok(pub.publishContext, 'it attaches to a worker of hyper2');
  await s.c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-2', secrets: {} }, ctx());
  t.equal(await kind(s.c.deleteVolume({ volumeId: id, secrets: {} }, ctx())), 'ok', 'and goes');
  t.same(
    (await s.helperVms()).map((v) => v.name),
    ['pve-nfs-csi-snapshot'],
    'with its volume VM',
  );
});

t.test('a larger clone into another zone is grown on the source, then migrated', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-csrc', null), ctx())).volume?.volumeId, 'source');
  await s.write(volid(src), 'the small source');
  // Requisite hyper2 and hyper3, hyper3 preferred: hyper3.
  const topology = { requisite: [zone('hyper2'), zone('hyper3')], preferred: [zone('hyper3'), zone('hyper2')] };
  const req = make('pvc-cfar', { volume: { volumeId: src } }, topology, 100 * 1024 * 1024);
  const { ctx: logged, lines } = loggedCtx();
  const made = present((await s.c.createVolume(req, logged)).volume, 'clone');
  const id = present(made.volumeId, 'id');
  t.match(id, /^homelab\/hyper3\//, 'the first preferred requisite host');
  t.ok(
    lines.some((l) =>
      /^volume cloned into another zone: \d+ bytes copied from hyper1 to hyper3 in /.test(String(l.msg)),
    ),
    'logged as a clone',
  );
  t.equal(made.capacityBytes, String(512 * 1024 * 1024), 'the size CreateVolume gives 100 MiB');
  const vol = (await s.volumesOf()).find((v) => v.volid === volid(id));
  t.same([vol?.node, vol?.size], ['hyper3', 512 * 1024 * 1024]);
  t.equal(await s.head(volid(id), 16), 'the small source');

  // The source's host among the requisite ones: thin, on the source's host.
  const near = { requisite: [zone('hyper2'), zone('hyper1')], preferred: [zone('hyper2'), zone('hyper1')] };
  const thin = present(
    (await s.c.createVolume(make('pvc-cnear', { volume: { volumeId: src } }, near), ctx())).volume?.volumeId,
    'thin',
  );
  t.match(thin, /^homelab\/hyper1\//, 'same zone stays thin');
  t.equal(await s.migrations(), 1, 'one migration in all');
});

t.test('a migration that breaks, or whose answer is lost, is finished by the retry', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-fsrc', null), ctx())).volume?.volumeId, 'source');
  await s.write(volid(src), 'kept across the faults');
  const req = make('pvc-ffar', { volume: { volumeId: src } }, preferZone('hyper2'));

  // The disk transfer breaks halfway: the volume VM stays on hyper1 holding its clone.
  await s.admin.patchFaults({ migrateFail: 'copy' });
  t.not(await kind(s.c.createVolume(req, ctx())), 'ok', 'the copy fails');
  const left = await s.helperVms();
  t.same(
    left.map((v) => `${v.name ?? ''}@${v.node}`),
    ['pve-nfs-csi-volume@hyper1'],
    'the volume VM is left on the source',
  );
  const vmid = present(left[0], 'volume VM').vmid;
  t.match(left[0]?.config.scsi0, new RegExp(`^local-lvm:vm-${vmid}-disk-0`), 'holding its clone');
  await s.admin.patchFaults({ migrateFail: 'off' });

  // A migration still running when the controller was killed: the retry waits for its lock.
  await s.admin.patchVm(vmid, { config: { lock: 'migrate' } });
  const retry = s.c.createVolume(req, ctx());
  await new Promise((r) => setTimeout(r, 1500));
  t.equal(await s.migrations(), 1, 'the retry does not migrate a locked VM');
  await s.admin.patchVm(vmid, { config: { lock: null } });
  const made = present((await retry).volume?.volumeId, 'after the fault');
  t.equal(made, `homelab/hyper2/local-lvm/vm-${vmid}-disk-0`, 'the same volume VM, now on hyper2');
  t.equal(await s.head(volid(made), 22), 'kept across the faults');
  t.equal(await s.migrations(), 2, 'migrated once more');

  // Killed after the migration, before the volume VM let go on hyper2: the retry finishes there.
  await s.admin.patchVm(vmid, { config: { unused0: null, scsi0: `${volid(made)},size=64M` } });
  t.equal(present((await s.c.createVolume(req, ctx())).volume?.volumeId, 'retry'), made);
  const vm = (await s.helperVms()).find((v) => v.vmid === vmid);
  t.same([vm?.node, vm?.config.scsi0], ['hyper2', undefined]);
  t.match(vm?.config.unused0, /-pve-nfs-csi-released-/, 'released on hyper2');

  // The migration's answer is lost (sent, done by Proxmox): the retry finds the VM on hyper2.
  const lost = make('pvc-lost', { volume: { volumeId: src } }, preferZone('hyper3'));
  await s.admin.patchFaults({ dropRoutes: [MIGRATE], dropRate: 1, dropPhase: 'after' });
  t.not(await kind(s.c.createVolume(lost, ctx())), 'ok', 'the answer is lost');
  await s.admin.patchFaults({ dropRoutes: [], dropRate: 0 });
  const found = present((await s.c.createVolume(lost, ctx())).volume?.volumeId, 'found');
  t.match(found, /^homelab\/hyper3\//);
  t.equal(await s.head(volid(found), 22), 'kept across the faults');
  const requests = (await s.admin.requests()).entries.filter((e) => e.route === MIGRATE);
  t.equal(requests.length, 3, 'no migration sent by the retry');
  t.same(
    (await s.helperVms()).map((v) => `${v.name ?? ''}@${v.node}`).sort(),
    ['pve-nfs-csi-volume@hyper2', 'pve-nfs-csi-volume@hyper3'],
    'no copy VM, no volume VM left on hyper1',
  );
});

t.test('refusals: no requested host has the storage; a volume restored on the source stays there', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-rsrc', null), ctx())).volume?.volumeId, 'source');
  const nowhere = make('pvc-nowhere', { volume: { volumeId: src } }, preferZone('hyper9'));
  const out = await outcome(s.c.createVolume(nowhere, ctx()));
  t.equal(out.kind, 'ResourceExhausted');
  t.match(out.message, /not available on the requested host\(s\) hyper9/);
  t.equal(await s.migrations(), 0);
  t.same(await s.helperVms(), [], 'nothing made');

  const here = make('pvc-here', { volume: { volumeId: src } });
  t.equal(await kind(s.c.createVolume(here, ctx())), 'ok', 'restored on hyper1');
  const there = { ...here, accessibilityRequirements: preferZone('hyper2') };
  t.equal(await kind(s.c.createVolume(there, ctx())), 'AlreadyExists', 'the same name into another zone');
});
