// VolumeAttributesClass for Proxmox volumes: the mutable keys, the marker volume that remembers a
// change while the disk is attached nowhere, and ControllerModifyVolume against the simulator
// over HTTPS — detached (applies at the next publish) and attached (the drive line is rewritten
// in place through the VM's queue, same slot and WWN, nothing left pending).
import t from 'tap';
import { driveHasOptions, parseDrive, withDriveOptions } from '../../../src/proxmox/controller/state/drives.js';
import {
  applyMutable,
  driveChanges,
  isMarkerName,
  markerName,
  markersOf,
  parseMarker,
  parseMutableParameters,
} from '../../../src/proxmox/controller/params/mutable.js';
import { diskNameFor } from '../../../src/proxmox/volume-id.js';
import { callCtx as ctx, createReq, publishReq } from '../../helpers/csi-requests.js';
import { outcome as kind } from '../../helpers/outcome.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import { vmNamed, volumesOn } from '../../helpers/sim-state.js';
import { present } from '../../helpers/present.js';

t.test('mutable keys: the three upstream ones, everything else refused by name', async (t) => {
  t.same(parseMutableParameters({ backup: 'false', diskIOPS: '500', diskMBps: '0' }), {
    backup: false,
    iops: 500,
    mbps: 0,
  });
  t.same(parseMutableParameters({}), {});
  for (const [p, re] of [
    [{ XXX_FakeKey: 'x' }, /"XXX_FakeKey" is not known; mutable keys: backup, diskIOPS, diskMBps/],
    [{ storage: 'other' }, /"storage" cannot be changed by a VolumeAttributesClass/],
    [{ cache: 'none' }, /cannot be changed/],
    [{ ssd: 'true' }, /cannot be changed/],
    [{ aio: 'native' }, /cannot be changed/],
    [{ encrypted: 'true' }, /cannot be changed/],
    [{ replicateSchedule: '*/15' }, /not supported.*replication/],
    [{ diskIOPS: '-1' }, /"diskIOPS": "-1" is not valid/],
    [{ diskMBps: '1.5' }, /not valid/],
    [{ backup: 'yes' }, /expected true or false/],
  ] as const) {
    t.throws(() => parseMutableParameters(p), { kind: 'InvalidArgument', message: re }, JSON.stringify(p));
  }
});

t.test("markers: name round trip, only the disk's own, never a PV's disk name", async (t) => {
  const name = markerName('vm-9999-pvc-a', 3, { backup: true, iops: 500, mbps: 0 });
  t.equal(name, 'vm-9999-pvc-a_vac3-b1-i500-m0');
  // pve-storage's parse_lvm_name: letters, digits, '-', '_', '.'; first and last a letter or digit
  t.match(name, /^[a-z0-9][a-z0-9\-_.]*[a-z0-9]$/i, 'a name pve-storage lists, reads and frees');
  t.same(parseMarker(name, 'vm-9999-pvc-a'), {
    disk: 'vm-9999-pvc-a',
    seq: 3,
    values: { backup: true, iops: 500, mbps: 0 },
    legacy: false,
  });
  t.equal(parseMarker(name, 'vm-9999-pvc'), undefined);
  t.same(parseMarker('vm-9999-x_vac1', 'vm-9999-x')?.values, {}, 'a marker may set nothing');
  t.same(
    parseMarker('vm-9999-pvc-a+vac7-i5', 'vm-9999-pvc-a'),
    { disk: 'vm-9999-pvc-a', seq: 7, values: { iops: 5 }, legacy: true },
    "an older version's '+vac' marker is still one",
  );
  t.equal(parseMarker('vm-9999-pvc-a'), undefined);
  t.notMatch(diskNameFor(9999, 'a+vac1-b1'), /\+/, 'a CO name with "+" is hashed, so no disk looks like a marker');
  for (const co of ['a_vac1-b1', 'pvc-x_vac12', 'x$_vac1-b1'])
    t.notOk(isMarkerName(diskNameFor(9999, co)), `the CO name ${co} is hashed: no disk looks like a marker`);
  t.equal(diskNameFor(9999, 'pvc-1234'), 'vm-9999-pvc-1234', 'Kubernetes names stay as upstream names them');
  t.equal(diskNameFor(9999, 'my_pv'), 'vm-9999-my_pv', "'_' alone is no marker");
  t.same(
    markersOf(
      [
        { volid: 'local-lvm:vm-9999-pvc-a+vac3-b1', size: 0 },
        { volid: 'local-lvm:vm-9999-pvc-a_vac2-b0', size: 0 },
        { volid: 'local-lvm:vm-9999-pvc-ab_vac9', size: 0 },
      ],
      'local-lvm',
      'vm-9999-pvc-a',
    ).map((m) => m.seq),
    [3, 2],
    'both forms, newest first: the numbering goes on above a listed older marker',
  );
  t.same(
    applyMutable(
      { backup: true, iothread: true, ssd: false, iops: 100, readonly: false },
      { backup: false, iops: 0, mbps: 30 },
    ),
    { backup: false, iothread: true, ssd: false, iops: undefined, mbps: 30, readonly: false },
  );
});

t.test('drive lines: options replaced in place, defaults understood', async (t) => {
  const line = 'local-lvm:vm-9999-a,backup=1,iops_rd=10,iops_wr=10,iothread=1,wwn=0x5056432d49443031';
  const changed = withDriveOptions(line, driveChanges({ backup: false, iops: 0, mbps: 40 }));
  const drive = (value: string) => present(parseDrive(value), `drive ${value}`);
  t.equal(changed, 'local-lvm:vm-9999-a,backup=0,iothread=1,wwn=0x5056432d49443031,mbps_rd=40,mbps_wr=40');
  t.ok(driveHasOptions(drive(changed), driveChanges({ backup: false, iops: 0, mbps: 40 })));
  t.notOk(driveHasOptions(drive(line), driveChanges({ iops: 20 })));
  t.ok(driveHasOptions(drive('local-lvm:vm-9999-a,wwn=0x1'), { backup: '1' }), 'no backup= means backup on');
  t.ok(driveHasOptions(drive('local-lvm:vm-9999-a,mbps_rd=40.0'), { mbps_rd: '40' }), 'numbers compare as numbers');
});

t.test('ControllerModifyVolume against the simulator', async (t) => {
  const { c, state } = await startProxmoxOnSim(t);
  t.ok(c.capabilities.includes('MODIFY_VOLUME'));
  const volids = async () => volumesOn(await state(), 'hyper1', 'local-lvm').map((v) => v.volid);
  const vm = async (name: string) => vmNamed(await state(), name);
  const create = (name: string, mutableParameters: Record<string, string> = {}) =>
    createReq(name, { parameters: { storage: 'local-lvm', backup: 'true', diskIOPS: '100' }, mutableParameters });
  const modify = (volumeId: string, mutableParameters: Record<string, string>) =>
    c.controllerModifyVolume({ volumeId, mutableParameters, secrets: {} }, ctx());
  const publish = (volumeId: string, volumeContext: Record<string, string>) =>
    c.controllerPublishVolume(publishReq(volumeId, 'talos-worker-1', volumeContext), ctx());
  const unpublish = (volumeId: string) =>
    c.controllerUnpublishVolume({ volumeId, nodeId: 'talos-worker-1', secrets: {} }, ctx());

  await t.test('a VolumeAttributesClass at creation goes into the context; a bad one is refused', async (t) => {
    const v = await c.createVolume(create('pvc-vac-create', { diskMBps: '25', backup: 'false' }), ctx());
    t.match(v.volume?.volumeContext, { storage: 'local-lvm', diskIOPS: '100', diskMBps: '25', backup: 'false' });
    t.match(await kind(c.createVolume(create('pvc-vac-bad', { XXX_FakeKey: 'x' }), ctx())), {
      kind: 'InvalidArgument',
      message: /XXX_FakeKey/,
    });
    t.notOk((await volids()).includes('local-lvm:vm-9999-pvc-vac-bad'), 'nothing allocated for a refused class');
    await c.deleteVolume({ volumeId: present(v.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx());
  });

  await t.test('detached: remembered beside the disk, applied at the next publish, hidden from listings', async (t) => {
    const v = present((await c.createVolume(create('pvc-vac-det'), ctx())).volume, 'CreateVolume: volume');
    const id = present(v.volumeId, 'CreateVolume: volume id');
    const context = present(v.volumeContext, 'CreateVolume: volume context');
    t.match(await kind(modify(id, { XXX_FakeKey: 'x' })), { kind: 'InvalidArgument' });
    t.match(await kind(modify('homelab/hyper1/local-lvm/vm-9999-pvc-nope', { diskIOPS: '1' })), { kind: 'NotFound' });
    t.match(await kind(modify(id, {})), { kind: 'ok' });
    t.notOk(
      (await volids()).some((x) => /[_+]vac/.test(x)),
      'an empty change stores nothing',
    );
    await modify(id, { diskIOPS: '500' });
    await modify(id, { backup: 'false' });
    await modify(id, { backup: 'false' });
    t.same(
      (await volids()).filter((x) => x.startsWith('local-lvm:vm-9999-pvc-vac-det_')),
      ['local-lvm:vm-9999-pvc-vac-det_vac2-b0-i500'],
      'one marker with both changes; a repeat changes nothing',
    );
    const listed = present(
      (await c.listVolumes({ maxEntries: 0, startingToken: '' }, ctx())).entries,
      'ListVolumes: entries',
    ).map((e) => present(e.volume?.volumeId, 'ListVolumes: a volume id'));
    t.ok(listed.includes(id));
    t.notOk(
      listed.some((x) => x.includes('+')),
      'ListVolumes never shows a marker',
    );
    t.match(await kind(c.controllerGetVolume({ volumeId: `${id}_vac2-b0-i500` }, ctx())), { kind: 'NotFound' });

    await publish(id, context);
    const line = present((await vm('talos-worker-1')).config.scsi1, 'scsi1 of talos-worker-1');
    t.match(line, /^local-lvm:vm-9999-pvc-vac-det,/);
    t.match(line, /backup=0/, "the modified backup flag, not the context's");
    t.match(line, /iops_rd=500,iops_wr=500/, "the modified IOPS, not the context's 100");
    await unpublish(id);
    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
    t.notOk(
      (await volids()).some((x) => x.includes('pvc-vac-det')),
      'DeleteVolume removes the markers too',
    );
  });

  await t.test(
    'attached: the drive line changes in place, same slot and WWN, nothing pending; reattach keeps it',
    async (t) => {
      const v = present((await c.createVolume(create('pvc-vac-att'), ctx())).volume, 'CreateVolume: volume');
      const id = present(v.volumeId, 'CreateVolume: volume id');
      const context = present(v.volumeContext, 'CreateVolume: volume context');
      const pub = await publish(id, context);
      const before = await vm('talos-worker-1');
      const key = `scsi${pub.publishContext?.lun}`;
      const wwnOf = (drive: string | undefined) =>
        present(/wwn=(0x[0-9a-f]+)/.exec(present(drive, `${key} of talos-worker-1`))?.[1], `the WWN of ${key}`);
      t.match(before.config[key], /iops_rd=100/);
      await modify(id, { diskIOPS: '0', diskMBps: '40', backup: 'false' });
      const after = await vm('talos-worker-1');
      t.notOk(after.pending[key], 'applied, not pending');
      t.match(after.config[key], /^local-lvm:vm-9999-pvc-vac-att,/);
      t.notMatch(after.config[key], /iops_rd/, 'diskIOPS 0 removes the limit');
      t.match(after.config[key], /backup=0/);
      t.match(after.config[key], /mbps_rd=40,mbps_wr=40/);
      t.equal(wwnOf(after.config[key]), wwnOf(before.config[key]), 'same WWN: the node keeps finding the disk');
      t.same((await publish(id, context)).publishContext, pub.publishContext, 'publish stays idempotent');
      await unpublish(id);
      await publish(id, context);
      const again = present(
        Object.values((await vm('talos-worker-1')).config).find((l) => l.startsWith('local-lvm:vm-9999-pvc-vac-att,')),
        'the reattached drive',
      );
      t.match(again, /mbps_rd=40/, 'a reattached disk keeps the change');
      t.notMatch(again, /iops_rd/);
      await unpublish(id);
      await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
    },
  );
});
