// The controller backend's RPCs against the fake Proxmox: placement and idempotency of
// CreateVolume, the refusals DeleteVolume and ControllerPublish owe, expansion, listing.
import t from 'tap';
import pino from 'pino';
import type * as T from '../../../../src/csi/types.js';
import { GiB } from '../../../../src/proxmox/controller/params/params.js';
import { present } from '../../../helpers/present.js';
import { FakeProxmox, seedCluster } from '../api/fake-api.js';
import { controllerOn } from '../fake-controller.js';
import { BLOCK, MOUNT, expandReq, publishReq as controllerPublishReq, zone } from '../../../helpers/csi-requests.js';
import { outcome as err } from '../../../helpers/outcome.js';
import { createdId } from '../../../helpers/created.js';

const ctx = (): T.CallContext => ({ log: pino({ level: 'silent' }), signal: new AbortController().signal });

function createReq(name: string, o: Partial<T.CreateVolumeRequest> = {}): T.CreateVolumeRequest {
  return {
    name,
    capacityRange: { requiredBytes: String(GiB), limitBytes: '0' },
    volumeCapabilities: [MOUNT],
    parameters: { storage: 'local-lvm' },
    secrets: {},
    volumeContentSource: null,
    accessibilityRequirements: { requisite: [zone('hyper2')], preferred: [zone('hyper2')] },
    mutableParameters: {},
    ...o,
  };
}

function setup(): { f: FakeProxmox; c: ReturnType<typeof controllerOn> } {
  const f = seedCluster();
  return { f, c: controllerOn(f) };
}

const publishReq = (
  volumeId: string,
  nodeId: string,
  o: Partial<T.ControllerPublishVolumeRequest> = {},
): T.ControllerPublishVolumeRequest => ({
  ...controllerPublishReq(volumeId, nodeId, { storage: 'local-lvm', ssd: 'true' }),
  ...o,
});
const validateReq = (volumeId: string, capability: T.VolumeCapability): T.ValidateVolumeCapabilitiesRequest => ({
  volumeId,
  volumeContext: {},
  volumeCapabilities: [capability],
  parameters: {},
  secrets: {},
  mutableParameters: {},
});

t.test('CreateVolume: placement, handle, topology, idempotency', async (t) => {
  const { f, c } = setup();
  const r = await c.createVolume(
    createReq('pvc-1', { parameters: { storage: 'local-lvm', ssd: 'true', 'csi.storage.k8s.io/pvc/name': 'data' } }),
    ctx(),
  );
  t.same(r.volume, {
    volumeId: 'homelab/hyper2/local-lvm/vm-9999-pvc-1',
    capacityBytes: String(GiB),
    volumeContext: { storage: 'local-lvm', ssd: 'true' },
    accessibleTopology: [zone('hyper2')],
  });
  t.equal(f.storageOf('hyper2', 'local-lvm').volumes.get('vm-9999-pvc-1'), GiB, 'allocated on the preferred host');
  t.same(
    await createdId(c.createVolume(createReq('pvc-1'), ctx())),
    r.volume?.volumeId,
    'same name, same size → same answer',
  );
  t.equal(f.count('allocDisk'), 1, 'not allocated twice');
  const diff = await err(
    c.createVolume(
      createReq('pvc-1', { capacityRange: { requiredBytes: String(2 * GiB), limitBytes: String(2 * GiB) } }),
      ctx(),
    ),
  );
  t.equal(diff.kind, 'AlreadyExists', 'same name, other size');

  const noTopo = await c.createVolume(
    createReq('pvc-2', { accessibilityRequirements: null, capacityRange: null }),
    ctx(),
  );
  t.equal(
    noTopo.volume?.volumeId,
    'homelab/hyper1/local-lvm/vm-9999-pvc-2',
    'no topology: first host with the storage',
  );
  t.equal(noTopo.volume?.capacityBytes, String(10 * GiB), 'default size');
  const requisiteOnly = await c.createVolume(
    createReq('pvc-3', { accessibilityRequirements: { requisite: [zone('hyper3')], preferred: [] } }),
    ctx(),
  );
  t.match(requisiteOnly.volume?.volumeId, /\/hyper3\//, 'requisite when nothing is preferred');
});

t.test('CreateVolume: refusals', async (t) => {
  const { f, c } = setup();
  t.match(await err(c.createVolume(createReq('v', { parameters: { storage: 'nope' } }), ctx())), {
    kind: 'InvalidArgument',
    message: /storage "nope" does not exist/,
  });
  t.match(await err(c.createVolume(createReq('v', { parameters: { storage: 'local-lvm', fancy: '1' } }), ctx())), {
    kind: 'InvalidArgument',
    message: /"fancy"/,
  });
  t.match(
    await err(
      c.createVolume(
        createReq('v', {
          volumeCapabilities: [BLOCK],
          parameters: { storage: 'local-lvm', 'csi.storage.k8s.io/fstype': 'xfs' },
        }),
        ctx(),
      ),
    ),
    { kind: 'InvalidArgument', message: /block/ },
    'block + fstype',
  );
  t.match(
    await err(
      c.createVolume(
        createReq('v', { volumeCapabilities: [{ ...MOUNT, accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' } }] }),
        ctx(),
      ),
    ),
    { kind: 'InvalidArgument' },
  );
  t.match(
    await err(
      c.createVolume(
        createReq('v', { capacityRange: { requiredBytes: String(GiB + 1), limitBytes: String(GiB + 1) } }),
        ctx(),
      ),
    ),
    { kind: 'OutOfRange' },
  );
  t.match(
    await err(
      c.createVolume(
        createReq('v', { accessibilityRequirements: { requisite: [zone('hyper9')], preferred: [] } }),
        ctx(),
      ),
    ),
    { kind: 'ResourceExhausted', message: /hyper9/ },
  );
  t.match(
    await err(
      c.createVolume(
        createReq('v', { accessibilityRequirements: { requisite: [zone('hyper1', 'elsewhere')], preferred: [] } }),
        ctx(),
      ),
    ),
    { kind: 'ResourceExhausted', message: /region/ },
  );
  f.faults.strictSpace = true;
  // Proxmox's own refusal, past a thin-pool guard that is off (with it on, the guard refuses first).
  const unguarded = controllerOn(f, { poolGuard: { enabled: false, maxFill: 0, maxOvercommit: 0 } });
  t.match(
    await err(
      unguarded.createVolume(
        createReq('v', { capacityRange: { requiredBytes: String(500 * GiB), limitBytes: '0' } }),
        ctx(),
      ),
    ),
    { kind: 'ResourceExhausted' },
    'storage full',
  );
  t.equal(f.count('allocDisk'), 1);
});

t.test('CreateVolume: an allocation whose answer was lost is found, not repeated', async (t) => {
  const { f, c } = setup();
  f.faults.dropAfter.set('allocDisk', 1);
  const r = await c.createVolume(createReq('pvc-lost'), ctx());
  t.equal(r.volume?.volumeId, 'homelab/hyper2/local-lvm/vm-9999-pvc-lost');
  t.equal(f.count('allocDisk'), 1);
});

t.test('publish / unpublish / delete lifecycle', async (t) => {
  const { f, c } = setup();
  const id = await createdId(c.createVolume(createReq('pvc-1'), ctx()));
  const pub = await c.controllerPublishVolume(publishReq(id, 'talos-worker-2'), ctx());
  t.same(pub.publishContext, { DevicePath: '/dev/disk/by-id/wwn-0x5056432d49443031', lun: '1' });
  t.match(
    f.vmOf(104).config.get('scsi1'),
    /^local-lvm:vm-9999-pvc-1,backup=0,discard=on,iothread=1,ssd=1,wwn=0x5056432d49443031$/,
  );

  t.match(
    await err(c.controllerPublishVolume(publishReq(id, 'talos-cp-2'), ctx())),
    { kind: 'FailedPrecondition', message: /talos-worker-2/ },
    'RWO on a second VM',
  );
  t.match(
    await err(c.controllerPublishVolume(publishReq(id, 'talos-worker-1'), ctx())),
    { kind: 'FailedPrecondition', message: /hyper2.*hyper1/ },
    'VM on another host',
  );
  t.match(await err(c.controllerPublishVolume(publishReq(id, 'fake-node-id-1'), ctx())), {
    kind: 'NotFound',
    message: /fake-node-id-1/,
  });
  t.match(
    await err(c.controllerPublishVolume(publishReq('fake-vol-id-1234', 'talos-worker-2'), ctx())),
    { kind: 'NotFound' },
    'malformed handle: no such volume',
  );
  t.match(
    await err(c.controllerPublishVolume(publishReq('homelab/hyper2/local-lvm/vm-9999-nope', 'talos-worker-2'), ctx())),
    { kind: 'NotFound' },
  );

  const got = await c.controllerGetVolume({ volumeId: id }, ctx());
  t.same(got.status, {
    publishedNodeIds: ['talos-worker-2'],
    volumeCondition: { abnormal: false, message: 'disk present on its storage' },
  });

  t.match(
    await err(c.deleteVolume({ volumeId: id, secrets: {} }, ctx())),
    { kind: 'FailedPrecondition', message: /talos-worker-2 \(104\)/ },
    'delete while attached names the VM',
  );
  await c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-2', secrets: {} }, ctx());
  t.notOk(f.vmOf(104).config.has('scsi1'));
  await c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-2', secrets: {} }, ctx());
  await c.controllerUnpublishVolume({ volumeId: id, nodeId: 'no-such-vm', secrets: {} }, ctx());
  await c.controllerUnpublishVolume({ volumeId: 'garbage', nodeId: 'talos-worker-2', secrets: {} }, ctx());
  t.pass('unpublish of what is not attached succeeds');

  await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
  t.notOk(f.storageOf('hyper2', 'local-lvm').volumes.has('vm-9999-pvc-1'), 'disk freed');
  await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
  await c.deleteVolume({ volumeId: 'fake-vol-id', secrets: {} }, ctx());
  await c.deleteVolume({ volumeId: 'otherregion/hyper1/local-lvm/vm-9999-x', secrets: {} }, ctx());
  t.pass('deleting what is gone, malformed or unknown succeeds');
});

t.test('unpublish without node id and leftovers; an unused entry on another VM keeps the disk', async (t) => {
  const { f, c } = setup();
  const id = await createdId(c.createVolume(createReq('pvc-1'), ctx()));
  await c.controllerPublishVolume(publishReq(id, 'talos-cp-2'), ctx());
  await c.controllerUnpublishVolume({ volumeId: id, nodeId: '', secrets: {} }, ctx());
  t.notOk(f.vmOf(103).config.has('scsi1'), 'detached from whichever VM had it');
  f.vmOf(104).config.set('unused3', 'local-lvm:vm-9999-pvc-1');
  const cond = await c.controllerGetVolume({ volumeId: id }, ctx());
  t.match(
    cond.status?.volumeCondition,
    { abnormal: true, message: /unused3 of VM talos-worker-2/ },
    'a leftover is an abnormal condition',
  );
  // Any key of any VM config keeps a disk (docs/ownership.md): the driver never removes a
  // reference it did not write, and never frees what one still names.
  t.match(await err(c.deleteVolume({ volumeId: id, secrets: {} }, ctx())), {
    kind: 'FailedPrecondition',
    message: /unused3 of VM talos-worker-2 \(104\)/,
  });
  t.ok(f.vmOf(104).config.has('unused3'), 'the reference stays');
  t.ok(f.storageOf('hyper2', 'local-lvm').volumes.has('vm-9999-pvc-1'), 'the disk stays');
  f.vmOf(104).config.delete('unused3');
  t.match(
    await err(c.deleteVolume({ volumeId: id, secrets: {} }, ctx())),
    { kind: 'ok' },
    'freed once nothing names it',
  );
});

t.test('delete refuses a disk another VM owns', async (t) => {
  const { c } = setup();
  t.match(await err(c.deleteVolume({ volumeId: 'homelab/hyper1/local-lvm/vm-101-disk-0', secrets: {} }, ctx())), {
    kind: 'FailedPrecondition',
  });
});

t.test(
  'expand: online through the VM it is attached to, no-op when big enough (offline: expand.test.ts)',
  async (t) => {
    const { f, c } = setup();
    const id = await createdId(c.createVolume(createReq('pvc-1'), ctx()));
    await c.controllerPublishVolume(publishReq(id, 'talos-worker-2'), ctx());
    f.resetCalls();
    const r = await c.controllerExpandVolume(expandReq(id, 2 * GiB), ctx());
    t.same(r, { capacityBytes: String(2 * GiB), nodeExpansionRequired: true });
    t.same(f.calls.find((x) => x.method === 'resizeDisk')?.args, ['hyper2', 104, 'scsi1', '2048M']);
    t.equal(f.count('updateVmConfig') + f.count('unlinkDisks'), 0, 'online: no helper attachment');
    const again = await c.controllerExpandVolume(expandReq(id, GiB, BLOCK), ctx());
    t.same(
      again,
      { capacityBytes: String(2 * GiB), nodeExpansionRequired: false },
      'already big enough; block needs no node step',
    );
    t.equal(f.count('resizeDisk'), 1);
    f.faults.lockTimeouts = 1;
    await c.controllerExpandVolume(expandReq(id, 3 * GiB), ctx());
    t.equal(
      f.storageOf('hyper2', 'local-lvm').volumes.get('vm-9999-pvc-1'),
      3 * GiB,
      'resize retried after a lock timeout',
    );
    t.match(await err(c.controllerExpandVolume(expandReq('fake', 2 * GiB), ctx())), { kind: 'NotFound' });
  },
);

t.test('ListVolumes: paging with stable tokens', async (t) => {
  const { c } = setup();
  const ids: string[] = [];
  for (const n of ['a', 'b', 'c', 'd', 'e']) ids.push(await createdId(c.createVolume(createReq(`pvc-${n}`), ctx())));
  const first = present(ids[0], 'the first volume');
  const second = present(ids[1], 'the second volume');
  await c.controllerPublishVolume(publishReq(second, 'talos-worker-2'), ctx());
  const all = await c.listVolumes({ maxEntries: 0, startingToken: '' }, ctx());
  t.same(
    all.entries?.map((e) => e.volume?.volumeId),
    ids,
    "only this driver's disks, sorted",
  );
  t.same(all.entries?.[1]?.status?.publishedNodeIds, ['talos-worker-2']);
  const p1 = await c.listVolumes({ maxEntries: 2, startingToken: '' }, ctx());
  t.equal(p1.entries?.length, 2);
  t.ok(p1.nextToken);
  await c.deleteVolume({ volumeId: first, secrets: {} }, ctx());
  await c.controllerUnpublishVolume({ volumeId: second, nodeId: 'talos-worker-2', secrets: {} }, ctx());
  await c.deleteVolume({ volumeId: second, secrets: {} }, ctx());
  const p2 = await c.listVolumes(
    { maxEntries: 2, startingToken: present(p1.nextToken, 'the first page token') },
    ctx(),
  );
  t.same(
    p2.entries?.map((e) => e.volume?.volumeId),
    ids.slice(2, 4),
    'the token survives deletion of the page it came from',
  );
  const p3 = await c.listVolumes(
    { maxEntries: 2, startingToken: present(p2.nextToken, 'the second page token') },
    ctx(),
  );
  t.same(
    p3.entries?.map((e) => e.volume?.volumeId),
    ids.slice(4),
  );
  t.equal(p3.nextToken, '', 'last page has no token');
  t.match(
    await err(c.listVolumes({ maxEntries: 0, startingToken: 'invalid-token' }, ctx())),
    { kind: 'Aborted' },
    'foreign token → ABORTED',
  );
});

t.test('ValidateVolumeCapabilities and GetCapacity', async (t) => {
  const { c } = setup();
  const id = await createdId(c.createVolume(createReq('pvc-1'), ctx()));
  const ok = await c.validateVolumeCapabilities(validateReq(id, MOUNT), ctx());
  t.ok(ok.confirmed);
  const no = await c.validateVolumeCapabilities(
    validateReq(id, { ...MOUNT, accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' } }),
    ctx(),
  );
  t.notOk(no.confirmed);
  t.match(no.message, /MULTI_NODE_MULTI_WRITER/);
  t.match(await err(c.validateVolumeCapabilities(validateReq('fake-vol-id-1', MOUNT), ctx())), { kind: 'NotFound' });

  const cap = await c.getCapacity(
    { volumeCapabilities: [], parameters: { storage: 'local-lvm' }, accessibleTopology: zone('hyper2') },
    ctx(),
  );
  t.equal(
    cap.availableCapacity,
    String(0.9 * 200 * GiB - 2 * 32 * GiB - GiB),
    'one host: its storage status (two boot disks and the new volume used), capped by the thin-pool guard at 90 %',
  );
  const total = await c.getCapacity({ volumeCapabilities: [], parameters: {}, accessibleTopology: null }, ctx());
  t.ok(Number(total.availableCapacity) > 3 * 100 * GiB, 'no topology: all hosts');
  t.equal(
    (
      await c.getCapacity(
        { volumeCapabilities: [], parameters: { storage: 'local-lvm' }, accessibleTopology: zone('hyper1', 'mars') },
        ctx(),
      )
    ).availableCapacity,
    '0',
  );
  t.equal(
    (
      await c.getCapacity(
        { volumeCapabilities: [], parameters: { storage: 'nope' }, accessibleTopology: zone('hyper1') },
        ctx(),
      )
    ).availableCapacity,
    '0',
  );
});

t.test('probe and capabilities', async (t) => {
  const { f, c } = setup();
  t.equal(await c.probe(new AbortController().signal), true);
  f.faults.dropBefore.set('version', 1);
  t.equal(await c.probe(new AbortController().signal), false);
  t.ok(c.capabilities.includes('PUBLISH_UNPUBLISH_VOLUME'));
  t.notOk(c.capabilities.includes('CLONE_VOLUME'));
});
