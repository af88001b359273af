// Snapshots, restores and clones of Proxmox disks against the simulator with real bytes (qmp
// backend without sockets: every volume, volume snapshot and clone is a sparse file):
// a snapshot is thin and outlives its source, a restore holds the source's bytes of snapshot
// time, a snapshot of a volume attached to a running worker leaves the worker's config alone,
// and no helper VM is left behind (docs/snapshots.md).
import t from 'tap';
import fs from 'node:fs';
import type * as T from '../../../src/csi/types.js';
import {
  MOUNT,
  callCtx as ctx,
  capacity,
  createReq,
  expandReq,
  preferZone,
  publishReq,
} from '../../helpers/csi-requests.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import { snapshotSimConfig } from '../../helpers/snapshot-sim-config.js';
import { present } from '../../helpers/present.js';
import { outcome } from '../../helpers/outcome.js';
import type { Teardown } from '../../helpers/teardown.js';
import pino from 'pino';
import { readCluster } from '../../../src/cli/report/facts.js';
import { proxmoxFindings } from '../../../src/cli/report/findings.js';
import { COPY_VM_STALE_MS, removeHelperVm } from '../../../src/cli/report/helper-vms.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { runStep } from '../../../src/proxmox/controller/copy/thin-copy.js';

async function start(t: Teardown) {
  const on = await startProxmoxOnSim(t, { sim: { config: snapshotSimConfig(), backend: 'qmp', qmp: {} } });
  // The admin server closes idle keep-alive sockets; a read after a long copy may meet one.
  const state = async () => on.state().catch(async () => on.state());
  const s = { ...on, state };
  const fileOf = async (volid: string) =>
    present(
      (await s.state()).nodes.flatMap((n) => n.storages.flatMap((st) => st.volumes)).find((v) => v.volid === volid)
        ?.file,
      `the file behind ${volid}`,
    );
  const head = async (volid: string, n: number) =>
    fs
      .readFileSync(await fileOf(volid))
      .subarray(0, n)
      .toString();
  const write = async (volid: string, text: string) => fs.writeFileSync(await fileOf(volid), text, { flag: 'r+' });
  const helpers = async () => (await s.state()).vms.filter((v) => v.name?.startsWith('pve-nfs-csi-copy'));
  return { ...s, head, write, helpers };
}

/** Small volumes: the simulator's files are real (sparse) files. */
const SIZE = 64 * 1024 * 1024;
const kind = async (p: Promise<unknown>) => (await outcome(p)).kind;
const volid = (id: string) => {
  const [, , storage, disk] = id.split('/');
  return `${storage}:${disk}`;
};
const make = (name: string, source?: T.CreateVolumeRequest['volumeContentSource']) =>
  createReq(name, {
    capacityRange: capacity(SIZE),
    parameters: { storage: 'local-lvm' },
    accessibilityRequirements: preferZone('hyper1'),
    volumeContentSource: source ?? null,
  });
const snapReq = (name: string, sourceVolumeId: string): T.CreateSnapshotRequest => ({
  name,
  sourceVolumeId,
  secrets: {},
  parameters: {},
});

t.test('a snapshot is thin, outlives its source and restores the bytes of its time', async (t) => {
  const s = await start(t);
  t.ok(s.c.capabilities.includes('CREATE_DELETE_SNAPSHOT') && s.c.capabilities.includes('CLONE_VOLUME'));
  const created = present((await s.c.createVolume(make('pvc-src'), ctx())).volume, 'source');
  const src = present(created.volumeId, 'source id');
  await s.write(volid(src), 'bytes at snapshot time');

  const snap = present((await s.c.createSnapshot(snapReq('snapshot-a', src), ctx())).snapshot, 'snapshot');
  t.match(snap.snapshotId, /^homelab\/hyper1\/local-lvm\/vm-8\d{8}-disk-0$/);
  t.equal(snap.sourceVolumeId, src);
  t.equal(snap.readyToUse, true);
  t.equal(snap.sizeBytes, String(created.capacityBytes), "the source's size");
  const again = present((await s.c.createSnapshot(snapReq('snapshot-a', src), ctx())).snapshot, 'retry');
  t.equal(again.snapshotId, snap.snapshotId, 'same name, same snapshot');
  t.same(await s.helpers(), [], 'the copy VM is gone');
  const state = await s.state();
  t.same(
    state.vms.filter((v) => Object.keys(v.snapshots).length).map((v) => v.vmid),
    [],
    'no VM is left with a snapshot section',
  );

  await s.write(volid(src), 'BYTES AFTER THE SNAPSHOT');
  t.equal(await kind(s.c.deleteVolume({ volumeId: src, secrets: {} }, ctx())), 'ok', 'the source goes');
  const listed = await s.c.listSnapshots(
    { maxEntries: 0, startingToken: '', sourceVolumeId: src, snapshotId: '', secrets: {} },
    ctx(),
  );
  t.same(
    (listed.entries ?? []).map((e) => e.snapshot?.snapshotId),
    [snap.snapshotId],
    'the snapshot outlives its source',
  );

  const restored = present(
    (await s.c.createVolume(make('pvc-restored', { snapshot: { snapshotId: present(snap.snapshotId, 'id') } }), ctx()))
      .volume,
    'restored',
  );
  const rid = present(restored.volumeId, 'restored id');
  t.equal(await s.head(volid(rid), 22), 'bytes at snapshot time', 'restored bytes are those of snapshot time');
  t.same(restored.contentSource?.snapshot?.snapshotId, snap.snapshotId);
  const retried = present(
    (await s.c.createVolume(make('pvc-restored', { snapshot: { snapshotId: present(snap.snapshotId, 'id') } }), ctx()))
      .volume,
    'retry',
  );
  t.equal(retried.volumeId, rid, 'a retried restore finds its volume');

  const pub = await s.c.controllerPublishVolume(publishReq(rid, 'talos-worker-1'), ctx());
  t.ok(pub.publishContext, 'a restored volume attaches like any other');

  t.equal(await kind(s.c.deleteSnapshot({ snapshotId: present(snap.snapshotId, 'id'), secrets: {} }, ctx())), 'ok');
  t.same(
    (
      await s.c.listSnapshots(
        { maxEntries: 0, startingToken: '', sourceVolumeId: '', snapshotId: '', secrets: {} },
        ctx(),
      )
    ).entries,
    [],
  );
  t.equal(
    await kind(s.c.deleteSnapshot({ snapshotId: present(snap.snapshotId, 'id'), secrets: {} }, ctx())),
    'ok',
    'again: nothing to do',
  );
});

t.test('a restored volume is listed with its node and publishes on a VM list read before it existed', async (t) => {
  // csi-attacher reconciles VolumeAttachments against ListVolumes' published nodes: a restored
  // volume left out of the listing is "attached but not found" and re-attached every minute,
  // which held up its detach (the k8s tier's VolSync scenario).
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-listed'), ctx())).volume?.volumeId, 'source');
  // Warms the controller's cached VM list before the restore's volume VM exists.
  await s.c.controllerPublishVolume(publishReq(src, 'talos-worker-1'), ctx());
  const snap = present((await s.c.createSnapshot(snapReq('snapshot-l', src), ctx())).snapshot?.snapshotId, 'snap');
  const rid = present(
    (await s.c.createVolume(make('pvc-listed-restored', { snapshot: { snapshotId: snap } }), ctx())).volume?.volumeId,
    'restored id',
  );
  await s.c.controllerPublishVolume(publishReq(rid, 'talos-worker-1'), ctx());
  const list = async () =>
    (await s.c.listVolumes({ maxEntries: 0, startingToken: '' }, ctx())).entries?.map((e) => ({
      id: e.volume?.volumeId,
      nodes: e.status?.publishedNodeIds,
      abnormal: e.status?.volumeCondition?.abnormal,
    })) ?? [];
  t.same(
    (await list()).filter((e) => e.id === rid || e.id === src),
    [src, rid].sort().map((id) => ({ id, nodes: ['talos-worker-1'], abnormal: false })),
    'both listed, published to the worker',
  );
  t.notOk(
    (await list()).some((e) => /vm-8\d{8}-disk-0$/.test(e.id ?? '') && e.id !== rid),
    "the snapshot VM's disk is a snapshot, not a volume",
  );
  const got = await s.c.controllerGetVolume({ volumeId: rid }, ctx());
  t.same(got.status?.publishedNodeIds, ['talos-worker-1'], 'ControllerGetVolume agrees');
  await s.c.controllerUnpublishVolume({ volumeId: rid, nodeId: 'talos-worker-1', secrets: {} }, ctx());
  t.same((await list()).find((e) => e.id === rid)?.nodes, [], 'unpublished: no node');
});

t.test('a clone of a volume attached to a running worker leaves the worker untouched', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-live'), ctx())).volume?.volumeId, 'source');
  await s.c.controllerPublishVolume(publishReq(src, 'talos-worker-1'), ctx());
  await s.write(volid(src), 'written by the running pod');
  const worker = (await s.state()).vms.find((v) => v.name === 'talos-worker-1');
  const clone = present(
    (await s.c.createVolume(make('pvc-clone', { volume: { volumeId: src } }), ctx())).volume,
    'clone',
  );
  const cid = present(clone.volumeId, 'clone id');
  t.equal(await s.head(volid(cid), 26), 'written by the running pod');
  const after = (await s.state()).vms.find((v) => v.name === 'talos-worker-1');
  t.same(after?.config, worker?.config, "the worker's config is unchanged");
  t.same(after?.snapshots, {}, 'and it has no snapshot section');
  t.equal(await kind(s.c.deleteVolume({ volumeId: cid, secrets: {} }, ctx())), 'ok');
  t.same(
    (await s.state()).vms.filter((v) => v.name?.startsWith('pve-nfs-csi-')).map((v) => v.name),
    [],
    'no helper VM left',
  );
});

t.test('a larger restore is cloned then grown; a restored volume expands, modifies and goes', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-small'), ctx())).volume?.volumeId, 'source');
  await s.write(volid(src), 'the small source');
  const snap = present((await s.c.createSnapshot(snapReq('snapshot-g', src), ctx())).snapshot?.snapshotId, 'snap');
  const bigger = (name: string, bytes: number) => ({
    ...make(name, { snapshot: { snapshotId: snap } }),
    capacityRange: capacity(bytes),
  });
  const made = present((await s.c.createVolume(bigger('pvc-grown', 100 * 1024 * 1024), ctx())).volume, 'grown');
  const id = present(made.volumeId, 'grown id');
  t.equal(made.capacityBytes, String(512 * 1024 * 1024), 'the size CreateVolume gives 100 MiB (512 MiB steps)');
  const sizeOf = async (v: string) =>
    (await s.state()).nodes.flatMap((n) => n.storages.flatMap((st) => st.volumes)).find((x) => x.volid === v)?.size;
  t.equal(await sizeOf(volid(id)), 512 * 1024 * 1024, 'grown on the storage');
  t.equal(await s.head(volid(id), 16), 'the small source', 'with the bytes of the snapshot');
  const again = present((await s.c.createVolume(bigger('pvc-grown', 100 * 1024 * 1024), ctx())).volume, 'retry');
  t.same([again.volumeId, again.capacityBytes], [id, made.capacityBytes], 'a retry finds it');
  t.equal(await kind(s.c.createVolume(bigger('pvc-grown', 2 * 1024 ** 3), ctx())), 'AlreadyExists', 'other size');

  t.equal(await kind(s.c.controllerExpandVolume(expandReq(id, 1024 ** 3, MOUNT), ctx())), 'ok', 'expand (offline)');
  t.equal(await sizeOf(volid(id)), 1024 ** 3);
  const modified = s.c.controllerModifyVolume(
    { volumeId: id, mutableParameters: { backup: 'false' }, secrets: {} },
    ctx(),
  );
  t.equal(await kind(modified), 'ok', 'modify');
  const owner = volid(id).split(':')[1]?.split('-')[1] ?? '?';
  const ofOwner = async () =>
    (await s.state()).nodes
      .flatMap((n) => n.storages.flatMap((st) => st.volumes))
      .filter((x) => x.volid.includes(`vm-${owner}-`))
      .map((x) => x.volid);
  t.ok(
    (await ofOwner()).some((v) => v.endsWith('_vac1-b0')),
    'the marker beside the restored disk',
  );
  const pub = await s.c.controllerPublishVolume(publishReq(id, 'talos-worker-1'), ctx());
  t.ok(pub.publishContext, 'published');
  t.equal(await kind(s.c.controllerExpandVolume(expandReq(id, 2 * 1024 ** 3, MOUNT), ctx())), 'ok', 'expand (online)');
  t.equal(await sizeOf(volid(id)), 2 * 1024 ** 3);
  await s.c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx());
  t.equal(await kind(s.c.deleteVolume({ volumeId: id, secrets: {} }, ctx())), 'ok', 'delete');
  t.same(await ofOwner(), [], 'the disk and its marker are gone');
  t.same(
    (await s.state()).vms.filter((v) => v.name === 'pve-nfs-csi-volume').map((v) => v.vmid),
    [],
    'and its volume VM',
  );
});

t.test('a retry finishes a restore left detached, or held before its growth, by a killed controller', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-kill'), ctx())).volume?.volumeId, 'source');
  await s.write(volid(src), 'kept across the kill');
  const restore = (bytes: number) => ({
    ...make('pvc-after-kill', { volume: { volumeId: src } }),
    capacityRange: capacity(bytes),
  });
  const id = present((await s.c.createVolume(restore(SIZE), ctx())).volume?.volumeId, 'restored');
  const disk = volid(id);
  const vmid = Number(disk.split(':')[1]?.split('-')[1]);
  const volumeVms = async () => (await s.state()).vms.filter((v) => v.name === 'pve-nfs-csi-volume').map((v) => v.vmid);
  const unused0 = async () => (await s.state()).vms.find((v) => v.vmid === vmid)?.config.unused0 ?? '';

  // Killed after the detach, before the release: the clone is the volume VM's unused0.
  await s.admin.patchVm(vmid, { config: { unused0: disk } });
  const again = present((await s.c.createVolume(restore(SIZE), ctx())).volume, 'retry after detach');
  t.equal(again.volumeId, id, 'the same volume');
  t.same(await volumeVms(), [vmid], 'no second volume VM');
  t.match(await unused0(), /-pve-nfs-csi-released-/, 'released now');

  // Killed before the growth of a larger request: the clone is still the volume VM's scsi0.
  await s.admin.patchVm(vmid, { config: { unused0: null, scsi0: `${disk},size=64M` } });
  const grown = present((await s.c.createVolume(restore(600 * 1024 * 1024), ctx())).volume, 'retry, larger');
  t.same([grown.volumeId, grown.capacityBytes], [id, String(1024 * 1024 * 1024)], 'grown to 1 GiB (512 MiB steps)');
  t.same(await volumeVms(), [vmid], 'still one volume VM');
  t.match(await unused0(), /-pve-nfs-csi-released-/, 'and released');
  t.equal(await s.head(disk, 20), 'kept across the kill');
});

t.test('report finds what interrupted copies and deletes leave; --fix removes it through the gate', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-left'), ctx())).volume?.volumeId, 'source');
  await s.c.createSnapshot(snapReq('snapshot-kept', src), ctx());
  const restored = present(
    (await s.c.createVolume(make('pvc-half-deleted', { volume: { volumeId: src } }), ctx())).volume?.volumeId,
    'restored',
  );
  // Proxmox refuses the clone, and the clean-up after it: the copy VM stays with its snapshot.
  // Then a DeleteVolume of the restored volume frees the disk but cannot destroy its volume VM.
  await s.admin.patchFaults({
    errorRate: 1,
    errorRoutes: [
      'POST /nodes/{node}/qemu/{vmid}/clone',
      'DELETE /nodes/{node}/qemu/{vmid}/snapshot/{snapname}',
      'DELETE /nodes/{node}/qemu/{vmid}',
    ],
  });
  t.not(await kind(s.c.createSnapshot(snapReq('snapshot-killed', src), ctx())), 'ok', 'the copy fails');
  t.not(await kind(s.c.deleteVolume({ volumeId: restored, secrets: {} }, ctx())), 'ok', 'the delete fails half-way');
  await s.admin.patchFaults({ errorRate: 0, errorRoutes: [] });
  const helperVms = async () =>
    (await s.state()).vms
      .filter((v) => v.name?.startsWith('pve-nfs-csi-'))
      .map((v) => `${v.name ?? ''}${Object.keys(v.snapshots).length ? '+snapshot' : ''}`)
      .sort();
  t.same(await helperVms(), ['pve-nfs-csi-copy+snapshot', 'pve-nfs-csi-snapshot', 'pve-nfs-csi-volume']);

  const log = pino({ level: 'silent' });
  const api = createHttpProxmoxApi({ cluster: s.cluster });
  t.teardown(() => api.close());
  const later = Date.now() + COPY_VM_STALE_MS + 60_000;
  const kubeView = { pvs: [], pvcs: [], attachments: [], classes: [] };
  const judge = async (now: number) =>
    proxmoxFindings(await readCluster('homelab', api, 9999, log), kubeView, { controllerVmId: 9999, graceMs: 0, now });
  const young = (await judge(Date.now())).filter((f) => f.kind === 'helper-vm' || f.kind === 'snapshot');
  t.same(
    young.map((f) => `${f.kind} ${f.action?.type ?? f.kept?.split(':')[0] ?? ''}`).sort(),
    ['helper-vm remove-helper', 'helper-vm younger than 30 min', 'snapshot '],
    'a young copy VM is kept; the volume VM without its disk is a leftover; the snapshot is listed',
  );
  const findings = await judge(later);
  const actions = findings.flatMap((f) => (f.action?.type === 'remove-helper' ? [f.action] : []));
  t.equal(actions.length, 2, 'the stale copy VM and the diskless volume VM');
  t.ok(
    findings.some((f) => f.kind === 'helper-vm' && /temporary snapshot csi/.test(f.detail)),
    'with the copy VM’s temporary snapshot',
  );
  const facts = await readCluster('homelab', api, 9999, log);
  const c = { cluster: facts.cluster, controllerVmId: 9999, signal: new AbortController().signal, log: () => {} };
  const removal = {
    api,
    storages: () => Promise.resolve(facts.storages),
    step: (st: Parameters<typeof runStep>[1]) => runStep(c, st),
    controllerVmId: 9999,
    now: () => later,
  };
  for (const a of actions) t.equal(await removeHelperVm(removal, a), 'removed');
  t.same(await helperVms(), ['pve-nfs-csi-snapshot'], 'only the snapshot is left');
  for (const a of actions) t.equal(await removeHelperVm(removal, a), 'already gone', 'again: nothing to do');
  const snapVm = present(
    facts.helpers?.find((h) => h.record.role === 'snapshot'),
    'snapshot VM',
  );
  await t.rejects(
    removeHelperVm(removal, { node: snapVm.vm.node, vmid: snapVm.vm.vmid, created: snapVm.record.created }),
    /left alone/,
    'a snapshot with its clone is never removed',
  );
});

t.test('refusals: unknown source, a host without the storage, a name reused for another source', async (t) => {
  const s = await start(t);
  const a = present((await s.c.createVolume(make('pvc-ra'), ctx())).volume?.volumeId, 'a');
  const b = present((await s.c.createVolume(make('pvc-rb'), ctx())).volume?.volumeId, 'b');
  await s.c.createSnapshot(snapReq('snapshot-r', a), ctx());
  t.equal(await kind(s.c.createSnapshot(snapReq('snapshot-r', b), ctx())), 'AlreadyExists');
  t.equal(
    await kind(s.c.createSnapshot(snapReq('snapshot-x', 'homelab/hyper1/local-lvm/vm-9999-pvc-none'), ctx())),
    'NotFound',
  );
  const limited = {
    ...make('pvc-big', { volume: { volumeId: a } }),
    capacityRange: { requiredBytes: String(SIZE), limitBytes: String(SIZE / 2) },
  };
  t.equal(await kind(s.c.createVolume(limited, ctx())), 'OutOfRange', 'a limit below the source');
  // Another host is a copy (snapshots-cross-zone.test.ts); a host without the storage is none.
  const nowhere = {
    ...make('pvc-far', { volume: { volumeId: a } }),
    accessibilityRequirements: preferZone('hyper9'),
  };
  t.equal(await kind(s.c.createVolume(nowhere, ctx())), 'ResourceExhausted');
});
