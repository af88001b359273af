// The unmodified driver against Proxmox VE 9's own API code (the pve-real tier: qemu-server,
// pve-storage, pve-access-control, pve-manager run unmodified; stand-ins in docs/testing.md), with
// the role docs/configuration.md gives and, for snapshots, what docs/snapshots.md adds (the lists
// src/cli/privileges.ts and the API adapter's error text hold). What Proxmox decides — parameter
// validation, permissions, VM config parse and write, volume names, task exit status — is its own.
import t from 'tap';
import { SNAPSHOT_PRIVILEGES } from '../../src/cli/privileges.js';
import { CSI_ROLE_PRIVILEGES } from '../../src/proxmox/roles.js';
import { callCtx as ctx, capacity, createReq, expandReq, publishReq } from '../helpers/csi-requests.js';
import { outcome } from '../helpers/outcome.js';
import { present as presentAs } from '../helpers/present.js';
import { proxmoxController } from '../helpers/proxmox-on-sim.js';
import { startPveReal } from '../helpers/pve-real.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const present = <V>(v: V | null | undefined, what = 'a value the driver returns'): V => presentAs(v, what);
const WORKER = 'talos-worker-1';
const WORKER_VMID = 111;
// Every distinct request of the driver's (method, path, parameter names) the real handlers
// answered, printed at the end: the measure of how much of the driver's API use is judged by
// Proxmox's own code here.
const seen = new Map<string, number>();
const onStop = (requests: string[]) => {
  for (const r of requests) seen.set(r, (seen.get(r) ?? 0) + 1);
};
t.teardown(() => {
  const shapes = [...seen.keys()].map((k) => k.replace(/ \d+$/, ''));
  t.comment(`distinct requests through the real handlers: ${String(new Set(shapes).size)}`);
  for (const k of [...seen.keys()].sort()) t.comment(`  ${k} ×${String(seen.get(k))}`);
});
const disk = (volumeId: string) => present(volumeId.split('/')[3], `the disk of ${volumeId}`);

t.test('base role (docs/configuration.md)', async (t) => {
  // One server for both: each start loads the whole API tree (tens of seconds on 2 shared cores).
  const pve = await startPveReal(t, CSI_ROLE_PRIVILEGES, { onStop });
  const c = proxmoxController(t, pve.cluster, { tuning: { queue: { confirmTimeoutMs: 15_000 } } });

  await t.test('create, publish, expand, unpublish, delete through the real handlers', async (t) => {
    const created = present(
      (await c.createVolume(createReq('pvc-real', { capacityRange: capacity(GiB) }), ctx())).volume,
    );
    const id = present(created.volumeId, 'volume id');
    t.match(id, /^homelab\/hyper1\/local-lvm\/vm-9999-pvc-real$/);
    t.equal(pve.lvs()[disk(id)], GiB, 'pve-storage allocated the thin volume (lvcreate -V)');
    t.equal(
      present((await c.createVolume(createReq('pvc-real', { capacityRange: capacity(GiB) }), ctx())).volume).volumeId,
      id,
      'CreateVolume is idempotent against the real storage listing',
    );

    const pub = await c.controllerPublishVolume(publishReq(id, WORKER, created.volumeContext), ctx());
    t.ok(pub.publishContext?.DevicePath, 'a device path');
    const conf = present(pve.vmConfig(WORKER_VMID), 'the worker config');
    t.match(conf, new RegExp(`^scsi\\d+: local-lvm:${disk(id)},.*size=1G`, 'm'), 'qemu-server wrote the drive');

    await c.controllerExpandVolume(expandReq(id, 2 * GiB), ctx());
    t.equal(pve.lvs()[disk(id)], 2 * GiB, 'lvextend through qemu-server resize');
    t.match(present(pve.vmConfig(WORKER_VMID)), /size=2G/, 'the drive line carries the new size');

    await c.controllerUnpublishVolume({ volumeId: id, nodeId: WORKER, secrets: {} }, ctx());
    t.notMatch(present(pve.vmConfig(WORKER_VMID)), new RegExp(disk(id)), 'detached, no unusedN left');

    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
    t.equal(pve.lvs()[disk(id)], undefined, 'freed');
    t.match(
      await outcome(c.deleteVolume({ volumeId: id, secrets: {} }, ctx())),
      { kind: 'ok' },
      'delete is idempotent',
    );
  });

  await t.test('VolumeAttributesClass on a detached disk: the marker is found again and cleaned', async (t) => {
    const v = present(
      (
        await c.createVolume(
          createReq('pvc-vac', {
            capacityRange: capacity(GiB),
            parameters: { storage: 'local-lvm', diskIOPS: '100' },
          }),
          ctx(),
        )
      ).volume,
    );
    const id = present(v.volumeId);
    const modified = await outcome(
      c.controllerModifyVolume({ volumeId: id, mutableParameters: { diskIOPS: '500' }, secrets: {} }, ctx()),
    );
    t.match(modified, { kind: 'ok' }, 'ControllerModifyVolume');
    const markers = () => Object.keys(pve.lvs()).filter((n) => n.startsWith(disk(id)) && n !== disk(id));
    t.equal(markers().length, 1, 'one marker volume remembers the change');
    // pve-storage's parse_lvm_name must accept the marker, or the listing hides it and neither GET
    // nor DELETE of it works: the value is lost at publish and the marker leaks.
    await c.controllerPublishVolume(publishReq(id, WORKER, v.volumeContext), ctx());
    t.match(present(pve.vmConfig(WORKER_VMID)), /iops_rd=500/, 'the remembered value is applied at publish', {
      todo: markers()[0]?.includes('+') ? 'marker names with "+" are refused by pve-storage' : false,
    });
    await c.controllerUnpublishVolume({ volumeId: id, nodeId: WORKER, secrets: {} }, ctx());
    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
    t.same(markers(), [], 'no marker left behind', {
      todo: markers()[0]?.includes('+') ? 'marker names with "+" cannot be deleted through pve-storage' : false,
    });
  });
});

t.test('snapshot role: CreateSnapshot, restore and clone through the real handlers', async (t) => {
  const role = [...new Set([...CSI_ROLE_PRIVILEGES.split(' '), ...SNAPSHOT_PRIVILEGES])].join(' ');
  const pve = await startPveReal(t, role, { onStop });
  const c = proxmoxController(t, pve.cluster, { tuning: { queue: { confirmTimeoutMs: 15_000 } } });
  const withOptions = role.split(' ').includes('VM.Config.Options');

  const src = present(
    present((await c.createVolume(createReq('pvc-snap-src', { capacityRange: capacity(GiB) }), ctx())).volume).volumeId,
  );
  const snapReq = { name: 'snapshot-a', sourceVolumeId: src, secrets: {}, parameters: {} };
  const snap = await outcome(c.createSnapshot(snapReq, ctx()));
  t.comment(`CreateSnapshot: ${snap.kind} ${snap.message}`);
  // Proxmox lists a new VM without its name until pvestatd's next pass (docs/simulator.md).
  const nameLag = /is not a copy VM of this driver/.test(snap.message);
  const todo = !withOptions
    ? 'the snapshot role lacks VM.Config.Options (qemu-server checks name/description)'
    : nameLag
      ? "a new VM is listed without its name until pvestatd's next pass; the driver refuses its own copy VM"
      : false;
  t.match(snap, { kind: 'ok' }, 'CreateSnapshot', { todo });
  if (!withOptions) {
    // qemu-server's $check_vm_modify_config_perm: `name` and `description` of the helper VM.
    t.match(snap.message, /Permission check failed \(\/vms\/\d+, VM\.Config\.Options\)/, 'refused by qemu-server');
  }
  if (snap.kind !== 'ok') return;
  const snapId = present((await c.createSnapshot(snapReq, ctx())).snapshot?.snapshotId, 'snapshot id (idempotent)');
  const restored = await c.createVolume(
    createReq('pvc-restored', {
      capacityRange: capacity(GiB),
      volumeContentSource: { snapshot: { snapshotId: snapId } },
    }),
    ctx(),
  );
  t.ok(restored.volume?.volumeId, 'restore');
  const cloned = await c.createVolume(
    createReq('pvc-cloned', { capacityRange: capacity(GiB), volumeContentSource: { volume: { volumeId: src } } }),
    ctx(),
  );
  t.ok(cloned.volume?.volumeId, 'clone');
  t.same(
    Object.keys(pve.lvs()).filter((n) => /^vm-(?!9999)/.test(n)),
    [],
    'no helper VM disk is left behind',
  );
});
