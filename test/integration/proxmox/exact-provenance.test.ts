// Exact provenance on the Proxmox side (docs/ownership.md, "Ids: what each RPC can change"): a
// DeleteSnapshot or DeleteVolume acts only on the snapshot or restored volume its id was issued
// for, spelled exactly; any other spelling (zone, storage, disk number, the placeholder, the
// source zone of a cross-zone restore, a live PVC disk given as a snapshot) changes nothing and
// answers OK as for an unknown id. Also: a refused DeleteVolume frees nothing first, a retry
// cleans what a cut copy left, a name reused with another source is ALREADY_EXISTS, restored and
// cloned volumes are sources like any other, and a restore into a host that holds disks of the
// derived helper VMID neither sticks nor leaks.
import t from 'tap';
import type * as T from '../../../src/csi/types.js';
import { callCtx as ctx, capacity, createReq, preferZone, publishReq } from '../../helpers/csi-requests.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import { snapshotSimConfig } from '../../helpers/snapshot-sim-config.js';
import { present } from '../../helpers/present.js';
import { outcome } from '../../helpers/outcome.js';
import type { Teardown } from '../../helpers/teardown.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { helperVmid } from '../../../src/proxmox/controller/copy/thin-copy.js';

const SIZE = 64 * 1024 * 1024;
const kind = async (p: Promise<unknown>) => (await outcome(p)).kind;
const make = (name: string, source?: T.CreateVolumeRequest['volumeContentSource'], zone = 'hyper1') =>
  createReq(name, {
    capacityRange: capacity(SIZE),
    parameters: { storage: 'local-lvm' },
    accessibilityRequirements: preferZone(zone),
    volumeContentSource: source ?? null,
  });
const snapReq = (name: string, sourceVolumeId: string): T.CreateSnapshotRequest => ({
  name,
  sourceVolumeId,
  secrets: {},
  parameters: {},
});

async function start(t: Teardown) {
  const s = await startProxmoxOnSim(t, { sim: { config: snapshotSimConfig() } });
  const state = async () => s.state().catch(async () => s.state());
  /** Every volume and VM of the cluster, as one comparable picture. */
  const world = async () => {
    const st = await state();
    return {
      volumes: st.nodes.flatMap((n) => n.storages.flatMap((x) => x.volumes.map((v) => `${n.name}/${v.volid}`))).sort(),
      vms: st.vms.map((v) => `${v.node}/${v.vmid}/${v.name ?? ''}/${JSON.stringify(v.config)}`).sort(),
    };
  };
  const helpers = async () =>
    (await state()).vms
      .filter((v) => v.name?.startsWith('pve-nfs-csi-'))
      .map((v) => `${v.name ?? ''}${Object.keys(v.snapshots).length ? '+snapshot' : ''}`)
      .sort();
  return { ...s, state, world, helpers };
}

/** The spellings of `id` that are not `id`: zone, none, storage, disk number, case. */
function misspelled(id: string): string[] {
  const [region = '', zone = '', storage = '', disk = ''] = id.split('/');
  const other = disk.replace(/-disk-(\d+)$/, (_m, n: string) => `-disk-${String(Number(n) + 1)}`);
  return [
    `${region}/${zone === 'hyper1' ? 'hyper2' : 'hyper1'}/${storage}/${disk}`,
    `${region}//${storage}/${disk}`,
    `${region}/${zone}/local-zfs/${disk}`,
    `${region}/${zone}/${storage}/${other}`,
    `${region}/${zone.toUpperCase()}/${storage}/${disk}`,
    `${region}/${zone}/${storage.toUpperCase()}/${disk}`,
  ];
}

t.test('DeleteSnapshot of a live PVC disk frees nothing; a proxmox-csi-plugin snapshot still goes', async (t) => {
  const s = await start(t);
  const live = present((await s.c.createVolume(make('pvc-0b1c2d3e-live'), ctx())).volume?.volumeId, 'live');
  const before = await s.world();
  t.equal(await kind(s.c.deleteSnapshot({ snapshotId: live, secrets: {} }, ctx())), 'ok', 'OK, as for an unknown id');
  t.same(await s.world(), before, 'the claim’s disk is still there');
  // Upstream leaves the zone empty only on shared storages: on local-lvm that is no volume's id.
  const noZone = live.replace('/hyper1/', '//');
  t.equal(await kind(s.c.deleteVolume({ volumeId: noZone, secrets: {} }, ctx())), 'ok', 'DeleteVolume without a zone');
  t.same(await s.world(), before, 'frees nothing on a local storage');
  // What proxmox-csi-plugin's CreateSnapshot made: vm-<ctl>-<snapshot name>, a plain copy.
  const legacy = present(
    (await s.c.createVolume(make('snapshot-6f0a4c1e-2b3d-4e5f-8a9b-0c1d2e3f4a51'), ctx())).volume?.volumeId,
    'legacy',
  );
  t.equal(await kind(s.c.deleteSnapshot({ snapshotId: legacy, secrets: {} }, ctx())), 'ok');
  t.notOk(
    (await s.world()).volumes.some((v) => v.endsWith('vm-9999-snapshot-6f0a4c1e-2b3d-4e5f-8a9b-0c1d2e3f4a51')),
    'the legacy snapshot is freed',
  );
});

t.test('DeleteSnapshot acts only on the exact snapshot id', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-snap-src'), ctx())).volume?.volumeId, 'source');
  const snap = present((await s.c.createSnapshot(snapReq('snapshot-exact', src), ctx())).snapshot?.snapshotId, 'snap');
  const before = await s.world();
  for (const wrong of misspelled(snap)) {
    t.equal(await kind(s.c.deleteSnapshot({ snapshotId: wrong, secrets: {} }, ctx())), 'ok', wrong);
    t.same(await s.world(), before, `${wrong} changed nothing`);
  }
  t.equal(await kind(s.c.deleteSnapshot({ snapshotId: snap, secrets: {} }, ctx())), 'ok');
  t.same(await s.helpers(), [], 'the exact id removes the snapshot VM');
});

t.test('DeleteVolume of a restored volume acts only on the exact handle it was issued', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-rsrc'), ctx())).volume?.volumeId, 'source');
  const id = present(
    (await s.c.createVolume(make('pvc-restored', { volume: { volumeId: src } }), ctx())).volume?.volumeId,
    'restored',
  );
  const [region, zone, storage, disk = ''] = id.split('/');
  const vmid = disk.split('-')[1] ?? '';
  const placeholder = `${region ?? ''}/${zone ?? ''}/${storage ?? ''}/vm-${vmid}-pve-nfs-csi-released-disk-0`;
  const before = await s.world();
  for (const wrong of [...misspelled(id), placeholder]) {
    t.equal(await kind(s.c.deleteVolume({ volumeId: wrong, secrets: {} }, ctx())), 'ok', wrong);
    t.same(await s.world(), before, `${wrong} changed nothing`);
  }
  // The real handle still works after all of them.
  t.equal(await kind(s.c.controllerPublishVolume(publishReq(id, 'talos-worker-1'), ctx())), 'ok', 'publish');
  await s.c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx());
  t.equal(await kind(s.c.deleteVolume({ volumeId: id, secrets: {} }, ctx())), 'ok');
  t.same(await s.helpers(), [], 'the exact handle removes the volume and its volume VM');
});

t.test('a cross-zone restore’s handle in the source zone changes nothing', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-xsrc'), ctx())).volume?.volumeId, 'source');
  const id = present(
    (await s.c.createVolume(make('pvc-xzone', { volume: { volumeId: src } }, 'hyper2'), ctx())).volume?.volumeId,
    'restored',
  );
  t.match(id, /^homelab\/hyper2\//);
  const before = await s.world();
  const inSource = id.replace('/hyper2/', '/hyper1/');
  t.equal(await kind(s.c.deleteVolume({ volumeId: inSource, secrets: {} }, ctx())), 'ok');
  t.same(await s.world(), before, 'the volume VM and its disk on hyper2 are kept');
});

t.test('a refused DeleteVolume of an attached restored volume keeps its marker', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-msrc'), ctx())).volume?.volumeId, 'source');
  const id = present(
    (await s.c.createVolume(make('pvc-marked', { volume: { volumeId: src } }), ctx())).volume?.volumeId,
    'restored',
  );
  const mod = s.c.controllerModifyVolume({ volumeId: id, mutableParameters: { backup: 'false' }, secrets: {} }, ctx());
  t.equal(await kind(mod), 'ok');
  t.equal(await kind(s.c.controllerPublishVolume(publishReq(id, 'talos-worker-1'), ctx())), 'ok');
  const before = await s.world();
  t.equal(await kind(s.c.deleteVolume({ volumeId: id, secrets: {} }, ctx())), 'FailedPrecondition', 'refused');
  t.same((await s.world()).volumes, before.volumes, 'its marker and its disk are kept');
});

t.test('a retry cleans the copy VM a cut restore or snapshot left', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-csrc'), ctx())).volume?.volumeId, 'source');
  // The clone landed, the clean-up of the copy VM did not (as after a kill right after the clone).
  await s.admin.patchFaults({
    errorRate: 1,
    errorRoutes: ['DELETE /nodes/{node}/qemu/{vmid}/snapshot/{snapname}', 'DELETE /nodes/{node}/qemu/{vmid}'],
  });
  await s.c.createVolume(make('pvc-cut', { volume: { volumeId: src } }), ctx());
  await s.c.createSnapshot(snapReq('snapshot-cut', src), ctx());
  await s.admin.patchFaults({ errorRate: 0, errorRoutes: [] });
  t.same(await s.helpers(), [
    'pve-nfs-csi-copy+snapshot',
    'pve-nfs-csi-copy+snapshot',
    'pve-nfs-csi-snapshot',
    'pve-nfs-csi-volume',
  ]);
  t.equal(await kind(s.c.createVolume(make('pvc-cut', { volume: { volumeId: src } }), ctx())), 'ok', 'retry');
  t.equal(await kind(s.c.createSnapshot(snapReq('snapshot-cut', src), ctx())), 'ok', 'retry');
  t.same(await s.helpers(), ['pve-nfs-csi-snapshot', 'pve-nfs-csi-volume'], 'the retries removed both copy VMs');
  t.equal(await kind(s.c.deleteVolume({ volumeId: src, secrets: {} }, ctx())), 'ok', 'the source can go');
});

t.test('the same name with another content source is ALREADY_EXISTS', async (t) => {
  const s = await start(t);
  const a = present((await s.c.createVolume(make('pvc-sa'), ctx())).volume?.volumeId, 'a');
  const b = present((await s.c.createVolume(make('pvc-sb'), ctx())).volume?.volumeId, 'b');
  t.equal(await kind(s.c.createVolume(make('pvc-named', { volume: { volumeId: a } }), ctx())), 'ok');
  const before = await s.world();
  t.equal(await kind(s.c.createVolume(make('pvc-named', { volume: { volumeId: b } }), ctx())), 'AlreadyExists');
  t.equal(await kind(s.c.createVolume(make('pvc-named'), ctx())), 'AlreadyExists', 'and without a source');
  t.equal(await kind(s.c.createVolume(make('pvc-sa', { volume: { volumeId: b } }), ctx())), 'AlreadyExists', 'plain');
  t.same(await s.world(), before, 'nothing made');
});

t.test('restored and cloned volumes can be snapshotted and cloned', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-gen0'), ctx())).volume?.volumeId, 'source');
  const clone = present(
    (await s.c.createVolume(make('pvc-gen1', { volume: { volumeId: src } }), ctx())).volume?.volumeId,
    'clone',
  );
  const snap = present((await s.c.createSnapshot(snapReq('snapshot-gen1', clone), ctx())).snapshot, 'snapshot');
  t.equal(snap.sourceVolumeId, clone);
  const again = s.c.createVolume(make('pvc-gen2', { snapshot: { snapshotId: present(snap.snapshotId, 'id') } }), ctx());
  t.equal(await kind(again), 'ok', 'restored from it');
  t.equal(await kind(s.c.createVolume(make('pvc-gen2b', { volume: { volumeId: clone } }), ctx())), 'ok', 'cloned');
});

t.test('a restore into a host holding disks of the derived helper VMID neither sticks nor leaks', async (t) => {
  const s = await start(t);
  const src = present((await s.c.createVolume(make('pvc-tsrc'), ctx())).volume?.volumeId, 'source');
  const api = createHttpProxmoxApi({ cluster: s.cluster });
  t.teardown(() => api.close());
  const taken = (await s.state()).vms.map((v) => v.vmid);
  const vmid = helperVmid('volume', 'pvc-taken', (id) => taken.includes(id));
  await api.allocDisk('hyper2', 'local-lvm', { vmid, filename: `vm-${vmid}-disk-0`, sizeBytes: SIZE });
  const before = (await s.world()).volumes;
  const got = await outcome(s.c.createVolume(make('pvc-taken', { volume: { volumeId: src } }, 'hyper2'), ctx()));
  t.equal(got.kind, 'ok', `answered: ${got.kind}`);
  t.ok((await s.world()).volumes.includes(`hyper2/local-lvm:vm-${vmid}-disk-0`), 'the disk on hyper2 is kept');
  t.same(await s.helpers(), ['pve-nfs-csi-volume'], 'only the restored volume’s volume VM');
  t.equal((await s.world()).volumes.length, before.length + 1, 'one new volume');
});
