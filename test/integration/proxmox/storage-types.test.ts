// Every storage type the driver serves, against the simulator's model of each pve-storage plugin
// (sim/ops/plugins.ts): create (and its retry), GetCapacity, publish, online and offline expand,
// unpublish, ListVolumes, delete; storageFormat refused where the plugin cannot; a shared
// storage's volume belongs to the region and follows its pod to another host without `move`;
// a PV upstream made on each type (its handle and disk name) keeps working.
import t from 'tap';
import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type * as T from '../../../src/csi/types.js';
import { GiB } from '../../../src/proxmox/controller/params/params.js';
import { DEFAULT_CONFIG_PATH } from '../../../sim/index.js';
import { MOUNT, callCtx as ctx, capacity, createReq, preferZone, publishReq } from '../../helpers/csi-requests.js';
import { outcome as kind } from '../../helpers/outcome.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import type { Teardown } from '../../helpers/teardown.js';
import { vmNamed } from '../../helpers/sim-state.js';
import { present } from '../../helpers/present.js';

interface Cfg {
  nodes: { name: string; storages: Record<string, unknown>[] }[];
}

const EXTRA = [
  { id: 'thick', type: 'lvm', vgname: 'vmdata', size: '100G' },
  { id: 'local-zfs', type: 'zfspool', vgname: 'rpool/data', size: '100G' },
  { id: 'ceph', type: 'rbd', vgname: 'rbd', size: '300G' },
  { id: 'local', type: 'dir', vgname: '/var/lib/vz', size: '100G' },
  { id: 'nas', type: 'nfs', vgname: '/mnt/pve/nas', size: '500G' },
  { id: 'smb', type: 'cifs', vgname: '/mnt/pve/smb', size: '500G' },
];

async function start(t: Teardown) {
  const config = parseYaml(fs.readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as Cfg;
  for (const n of config.nodes) n.storages.push(...EXTRA.map((s) => ({ ...s })));
  const s = await startProxmoxOnSim(t, { sim: { config } });
  const vm = async (name: string) => vmNamed(await s.state(), name);
  return { ...s, vm };
}

const req = (name: string, parameters: Record<string, string>, zone = 'hyper1'): T.CreateVolumeRequest =>
  createReq(name, { capacityRange: capacity(GiB), parameters, accessibilityRequirements: preferZone(zone) });

const expand = (volumeId: string, bytes: number): T.ControllerExpandVolumeRequest => ({
  volumeId,
  capacityRange: { requiredBytes: String(bytes), limitBytes: '0' },
  secrets: {},
  volumeCapability: MOUNT,
});

const TOPO_REGION = 'topology.kubernetes.io/region';
const TOPO_ZONE = 'topology.kubernetes.io/zone';

const CASES = [
  { storage: 'thick', format: undefined, id: 'homelab/hyper1/thick/vm-9999-pvc-', shared: false },
  { storage: 'local-zfs', format: undefined, id: 'homelab/hyper1/local-zfs/vm-9999-pvc-', shared: false },
  { storage: 'ceph', format: undefined, id: 'homelab//ceph/vm-9999-pvc-', shared: true },
  { storage: 'local', format: 'raw', id: 'homelab/hyper1/local/9999/vm-9999-pvc-', shared: false },
  { storage: 'local', format: 'qcow2', id: 'homelab/hyper1/local/9999/vm-9999-pvc-', shared: false },
  { storage: 'nas', format: 'qcow2', id: 'homelab//nas/9999/vm-9999-pvc-', shared: true },
  { storage: 'smb', format: 'raw', id: 'homelab//smb/9999/vm-9999-pvc-', shared: true },
] as const;

t.test('the whole lifecycle on each storage type', async (t) => {
  const { c, vm } = await start(t);
  for (const [i, k] of CASES.entries()) {
    const name = `pvc-${k.storage}-${i}`;
    const params: Record<string, string> = { storage: k.storage, ...(k.format && { storageFormat: k.format }) };
    const created = await c.createVolume(req(name, params), ctx());
    const id = present(created.volume?.volumeId, 'volume id');
    const ext = k.format ? `.${k.format}` : '';
    t.equal(id, `${k.id}${name.slice(4)}${ext}`, `${k.storage}: the handle upstream would make`);
    t.same(
      created.volume?.accessibleTopology,
      [{ segments: k.shared ? { [TOPO_REGION]: 'homelab' } : { [TOPO_REGION]: 'homelab', [TOPO_ZONE]: 'hyper1' } }],
      `${k.storage}: topology`,
    );
    t.equal((await c.createVolume(req(name, params), ctx())).volume?.volumeId, id, `${k.storage}: idempotent`);

    const cap = await c.getCapacity(
      {
        volumeCapabilities: [],
        parameters: { storage: k.storage },
        accessibleTopology: { segments: { [TOPO_REGION]: 'homelab', [TOPO_ZONE]: 'hyper1' } },
      },
      ctx(),
    );
    t.ok(Number(cap.availableCapacity) > 0, `${k.storage}: capacity from the storage status`);

    await c.controllerPublishVolume(publishReq(id, 'talos-worker-1', created.volume?.volumeContext), ctx());
    const disk = id.split('/').slice(3).join('/');
    t.match((await vm('talos-worker-1')).config.scsi1, `${k.storage}:${disk},`, `${k.storage}: attached`);
    t.same(await c.controllerExpandVolume(expand(id, 2 * GiB), ctx()), {
      capacityBytes: String(2 * GiB),
      nodeExpansionRequired: true,
    });
    const listed = await c.listVolumes({ maxEntries: 0, startingToken: '' }, ctx());
    t.ok(
      listed.entries?.some((e) => e.volume?.volumeId === id && e.volume.capacityBytes === String(2 * GiB)),
      `${k.storage}: listed with its size`,
    );
    await c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx());
    t.notOk((await vm('talos-worker-1')).config.scsi1, `${k.storage}: detached`);
    t.same(await c.controllerExpandVolume(expand(id, 3 * GiB), ctx()), {
      capacityBytes: String(3 * GiB),
      nodeExpansionRequired: true,
    });
    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
    const after = await c.listVolumes({ maxEntries: 0, startingToken: '' }, ctx());
    t.notOk(
      after.entries?.some((e) => e.volume?.volumeId === id),
      `${k.storage}: gone`,
    );
  }
});

t.test('storageFormat: a clear InvalidArgument where the plugin cannot', async (t) => {
  const { c } = await start(t);
  for (const [storage, why] of [
    ['local-lvm', /LVM-thin holds raw volumes only/],
    ['local-zfs', /zvols, raw only/],
    ['ceph', /raw images only/],
    ['thick', /snapshot-as-volume-chain/],
  ] as const) {
    t.match(await kind(c.createVolume(req(`pvc-q-${storage}`, { storage, storageFormat: 'qcow2' }), ctx())), {
      kind: 'InvalidArgument',
      message: why,
    });
  }
});

t.test('snapshots and clones: a clear FAILED_PRECONDITION where the driver has no mechanism', async (t) => {
  const { c } = await start(t);
  for (const [storage, why] of [
    ['local-zfs', /ZFS snapshots and clones are not implemented/],
    ['ceph', /RBD snapshots and clones are not implemented/],
    ['thick', /thick LVM has no thin snapshots/],
    ['local', /qcow2 snapshots are internal/],
  ] as const) {
    const id = present((await c.createVolume(req(`pvc-snap-${storage}`, { storage }), ctx())).volume?.volumeId, 'id');
    t.match(
      await kind(c.createSnapshot({ sourceVolumeId: id, name: `snap-${storage}`, secrets: {}, parameters: {} }, ctx())),
      {
        kind: 'FailedPrecondition',
        message: why,
      },
    );
    t.match(
      await kind(
        c.createVolume(
          createReq(`pvc-clone-${storage}`, {
            parameters: { storage },
            volumeContentSource: { volume: { volumeId: id } },
          }),
          ctx(),
        ),
      ),
      { kind: 'FailedPrecondition', message: /a clone of .* is not possible/ },
    );
  }
});

t.test('VolumeAttributesClass: markers on lvm and rbd, a clear refusal on zfs and file storages', async (t) => {
  const { c, vm } = await start(t);
  const modify = (volumeId: string) =>
    c.controllerModifyVolume({ volumeId, secrets: {}, mutableParameters: { diskIOPS: '300' } }, ctx());
  for (const storage of ['thick', 'ceph']) {
    const id = present((await c.createVolume(req(`pvc-vac-${storage}`, { storage }), ctx())).volume?.volumeId, 'id');
    await modify(id);
    await c.controllerPublishVolume(publishReq(id, 'talos-worker-1'), ctx());
    t.match((await vm('talos-worker-1')).config.scsi1, /iops_rd=300/, `${storage}: the marker's value applies`);
    await c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx());
    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
  }
  for (const storage of ['local-zfs', 'local']) {
    const id = present((await c.createVolume(req(`pvc-vac-${storage}`, { storage }), ctx())).volume?.volumeId, 'id');
    t.match(await kind(modify(id)), { kind: 'FailedPrecondition', message: /cannot carry the marker/ });
  }
});

t.test('a shared storage: the volume follows its pod to another host without move', async (t) => {
  const { c, vm } = await start(t);
  for (const storage of ['ceph', 'nas']) {
    const created = await c.createVolume(req(`pvc-roam-${storage}`, { storage }), ctx());
    const id = present(created.volume?.volumeId, 'volume id');
    await c.controllerPublishVolume(publishReq(id, 'talos-worker-1'), ctx());
    t.match(
      await kind(c.controllerPublishVolume(publishReq(id, 'talos-worker-2'), ctx())),
      { kind: 'FailedPrecondition', message: /talos-worker-1/ },
      `${storage}: still on one VM at a time`,
    );
    await c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx());
    await c.controllerPublishVolume(publishReq(id, 'talos-worker-2'), ctx());
    t.match((await vm('talos-worker-2')).config.scsi1, new RegExp(`^${storage}:`), `${storage}: on hyper2 now`);
    await c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-2', secrets: {} }, ctx());
    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
  }
  const local = present(
    (await c.createVolume(req('pvc-local', { storage: 'local-zfs' }), ctx())).volume?.volumeId,
    'id',
  );
  t.match(await kind(c.controllerPublishVolume(publishReq(local, 'talos-worker-2'), ctx())), {
    kind: 'FailedPrecondition',
    message: /lives on host hyper1/,
  });
});

t.test("drop-in: upstream's volumes on each type keep working", async (t) => {
  const { c, vm, cluster } = await start(t);
  const api = createHttpProxmoxApi({ cluster, queryTimeoutMs: 10_000 });
  // What upstream's CreateVolume leaves: the disk allocated by name, and the handle it returned
  // (volume.NewVolume; VolumeSharedID with an empty zone on a shared storage).
  const upstream = [
    { storage: 'local-zfs', file: 'vm-9999-pvc-up1', handle: 'homelab/hyper1/local-zfs/vm-9999-pvc-up1' },
    { storage: 'ceph', file: 'vm-9999-pvc-up2', handle: 'homelab//ceph/vm-9999-pvc-up2' },
    { storage: 'thick', file: 'vm-9999-pvc-up3', handle: 'homelab/hyper1/thick/vm-9999-pvc-up3' },
    { storage: 'local', file: 'vm-9999-pvc-up4.raw', handle: 'homelab/hyper1/local/9999/vm-9999-pvc-up4.raw' },
    { storage: 'nas', file: 'vm-9999-pvc-up5.qcow2', handle: 'homelab//nas/9999/vm-9999-pvc-up5.qcow2' },
  ];
  for (const u of upstream) {
    const volid = await api.allocDisk('hyper1', u.storage, {
      vmid: 9999,
      filename: u.file,
      sizeBytes: GiB,
      format: u.file.endsWith('.qcow2') ? 'qcow2' : 'raw',
    });
    t.equal(volid, `${u.storage}:${u.handle.split('/').slice(3).join('/')}`);
    const ctxUp = { storage: u.storage, replicate: '0', ...(u.file.includes('.') && { storageFormat: 'raw' }) };
    await c.controllerPublishVolume(publishReq(u.handle, 'talos-worker-1', ctxUp), ctx());
    t.match((await vm('talos-worker-1')).config.scsi1, `${u.storage}:${u.handle.split('/').slice(3).join('/')},`);
    t.same((await c.controllerExpandVolume(expand(u.handle, 2 * GiB), ctx())).capacityBytes, String(2 * GiB));
    await c.controllerUnpublishVolume({ volumeId: u.handle, nodeId: 'talos-worker-1', secrets: {} }, ctx());
    await c.deleteVolume({ volumeId: u.handle, secrets: {} }, ctx());
    t.same(await api.listContent('hyper1', u.storage, 9999), [], `${u.storage}: freed`);
  }
});
