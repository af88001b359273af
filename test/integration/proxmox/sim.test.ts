// The controller backend against the project's Proxmox VE simulator over HTTPS (backend
// `none`): the whole chain — proxmox-api package, CA pinning, error mapping, attach queue — and
// the simulator's faults: lock contention, failed tasks, dropped connections, detaches that stay
// pending, missing privileges.
import t from 'tap';
import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type * as T from '../../../src/csi/types.js';
import { GiB } from '../../../src/proxmox/controller/params/params.js';
import { DEFAULT_CONFIG_PATH } from '../../../sim/index.js';
import {
  MOUNT,
  callCtx as ctx,
  capacity,
  createReq as createVolumeReq,
  preferZone,
  publishReq as pubReq,
} from '../../helpers/csi-requests.js';
import { outcome as kind } from '../../helpers/outcome.js';
import { proxmoxController, startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import type { Teardown } from '../../helpers/teardown.js';
import { vmNamed } from '../../helpers/sim-state.js';
import { present } from '../../helpers/present.js';
import { createdId } from '../../helpers/created.js';

const AUDITOR = { id: 'auditor@pve!ro', secret: '11111111-2222-3333-4444-555555555555', role: 'PVEAuditor' };

async function start(t: Teardown) {
  const config = parseYaml(fs.readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as { tokens: unknown[] };
  config.tokens.push(AUDITOR);
  const s = await startProxmoxOnSim(t, { sim: { config } });
  const vm = async (name: string) => vmNamed(await s.state(), name);
  return { ...s, vm };
}

const createReq = (name: string, zone = 'hyper1', size = GiB): T.CreateVolumeRequest =>
  createVolumeReq(name, {
    capacityRange: capacity(size),
    parameters: { storage: 'local-lvm', ssd: 'true', backup: 'true', cache: 'writethrough' },
    accessibilityRequirements: preferZone(zone),
  });

t.test('lifecycle over HTTPS with the CA pinned', async (t) => {
  const { c, vm } = await start(t);
  t.equal(await c.probe(AbortSignal.timeout(5000)), true);
  const created = await c.createVolume(createReq('pvc-life'), ctx());
  const id = present(created.volume?.volumeId, 'CreateVolume: volume id');
  t.equal(id, 'homelab/hyper1/local-lvm/vm-9999-pvc-life');
  t.equal(created.volume?.capacityBytes, String(GiB));
  t.equal((await c.createVolume(createReq('pvc-life'), ctx())).volume?.volumeId, id, 'idempotent');
  t.equal((await kind(c.createVolume(createReq('pvc-life', 'hyper1', 2 * GiB), ctx()))).kind, 'AlreadyExists');

  const pub = await c.controllerPublishVolume(pubReq(id, 'talos-worker-1', created.volume?.volumeContext), ctx());
  t.same(pub.publishContext, { DevicePath: '/dev/disk/by-id/wwn-0x5056432d49443031', lun: '1' });
  const w1 = await vm('talos-worker-1');
  t.match(
    w1.config.scsi1,
    /^local-lvm:vm-9999-pvc-life,.*wwn=0x5056432d49443031/,
    'attached as scsi1 with the PVC-ID WWN',
  );
  t.match(w1.config.scsi1, /backup=1/);
  t.match(w1.config.scsi1, /ssd=1/);
  t.same(
    (await c.controllerPublishVolume(pubReq(id, 'talos-worker-1'), ctx())).publishContext,
    pub.publishContext,
    'publish is idempotent',
  );
  t.match(await kind(c.controllerPublishVolume(pubReq(id, 'talos-cp-1'), ctx())), {
    kind: 'FailedPrecondition',
    message: /talos-worker-1/,
  });
  t.match(await kind(c.controllerPublishVolume(pubReq(id, 'fake-node-id-x'), ctx())), { kind: 'NotFound' });
  t.match(await kind(c.deleteVolume({ volumeId: id, secrets: {} }, ctx())), {
    kind: 'FailedPrecondition',
    message: /talos-worker-1 \(111\)/,
  });

  const exp = await c.controllerExpandVolume(
    {
      volumeId: id,
      capacityRange: { requiredBytes: String(2 * GiB), limitBytes: '0' },
      secrets: {},
      volumeCapability: MOUNT,
    },
    ctx(),
  );
  t.same(exp, { capacityBytes: String(2 * GiB), nodeExpansionRequired: true }, 'online expansion through the VM');
  const got = await c.controllerGetVolume({ volumeId: id }, ctx());
  t.equal(got.volume?.capacityBytes, String(2 * GiB));
  t.same(got.status?.publishedNodeIds, ['talos-worker-1']);
  const list = await c.listVolumes({ maxEntries: 0, startingToken: '' }, ctx());
  t.same(
    list.entries?.map((e) => e.volume?.volumeId),
    [id],
  );

  await c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx());
  const after = await vm('talos-worker-1');
  t.notOk(after.config.scsi1, 'detached');
  t.same(after.pendingDelete, [], 'nothing pending');
  t.same(
    await c.controllerExpandVolume(
      {
        volumeId: id,
        capacityRange: { requiredBytes: String(3 * GiB), limitBytes: '0' },
        secrets: {},
        volumeCapability: MOUNT,
      },
      ctx(),
    ),
    { capacityBytes: String(3 * GiB), nodeExpansionRequired: true },
    'offline expansion through a helper VM (sim-expand.test.ts)',
  );
  await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
  await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
  t.same((await c.listVolumes({ maxEntries: 0, startingToken: '' }, ctx())).entries, [], 'gone');
  const cap = await c.getCapacity(
    {
      volumeCapabilities: [],
      parameters: { storage: 'local-lvm' },
      accessibleTopology: {
        segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper1' },
      },
    },
    ctx(),
  );
  t.ok(Number(cap.availableCapacity) > 0);
});

t.test('24 concurrent publishes to one VM', async (t) => {
  const { c, vm, admin } = await start(t);
  await admin.patchFaults({ latencyMs: 5 });
  const ids = await Promise.all(
    Array.from({ length: 24 }, async (_, i) => await createdId(c.createVolume(createReq(`pvc-storm-${i}`), ctx()))),
  );
  await admin.resetCounters();
  const res = await Promise.all(ids.map((id) => c.controllerPublishVolume(pubReq(id, 'talos-worker-1'), ctx())));
  const luns = res.map((r) => Number(r.publishContext?.lun)).sort((a, b) => a - b);
  t.same(
    luns,
    Array.from({ length: 24 }, (_, i) => i + 1),
    'every volume got its own slot',
  );
  const counters = await admin.counters();
  t.ok(
    (counters.byRoute['POST /nodes/{node}/qemu/{vmid}/config'] ?? 0) <= 3,
    `config changes: ${counters.byRoute['POST /nodes/{node}/qemu/{vmid}/config']}`,
  );
  t.same(counters.errorsByRoute, {}, 'no failed Proxmox call (no lock contention)');
  const w1 = await vm('talos-worker-1');
  t.equal(Object.keys(w1.config).filter((k) => /^scsi([1-9]|[12]\d|30)$/.test(k)).length, 24);
  await Promise.all(
    ids.map((id) => c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx())),
  );
  t.equal(
    Object.keys((await vm('talos-worker-1')).config).filter((k) => /^scsi([1-9]|[12]\d|30)$/.test(k)).length,
    0,
    'all detached',
  );
});

t.test('faults: lock held by someone else, failed task, dropped answers, stuck detach', async (t) => {
  const { c, vm, admin } = await start(t);
  const id = await createdId(c.createVolume(createReq('pvc-f'), ctx()));

  await admin.holdLock({ vmid: 111 }, 1500);
  const held = await c.controllerPublishVolume(pubReq(id, 'talos-worker-1'), ctx());
  t.equal(held.publishContext?.lun, '1', 'a lock timeout is retried with backoff until the lock is free');
  await c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx());

  await admin.patchFaults({ taskFailRate: 1, taskFailPhase: 'before' });
  t.match(
    await kind(c.controllerPublishVolume(pubReq(id, 'talos-worker-1'), ctx())),
    { kind: 'Unavailable', message: /task failed/ },
    'a failed task is an error',
  );
  await admin.patchFaults({ taskFailRate: 0 });
  t.notOk((await vm('talos-worker-1')).config.scsi1);

  await admin.resetCounters();
  await admin.patchFaults({ dropRate: 1, dropPhase: 'after', dropRoutes: ['POST /nodes/{node}/qemu/{vmid}/config'] });
  const dropped = c.controllerPublishVolume(pubReq(id, 'talos-worker-1'), ctx());
  // Only the first config change loses its answer: the fault goes off once it has fired.
  let fired = false;
  for (let i = 0; i < 200 && !fired; i++) {
    fired = (await admin.requests()).entries.some((e) => e.fault === 'drop-after');
    if (!fired) await new Promise((r) => setTimeout(r, 10));
  }
  await admin.patchFaults({ dropRate: 0 });
  t.ok(fired, 'the connection was dropped after the change was made');
  t.equal((await dropped).publishContext?.lun, '1', 'answer lost, change made: found by reading back');
  const counters = await admin.counters();
  t.equal(counters.byRoute['POST /nodes/{node}/qemu/{vmid}/config'], 1, 'the config change was sent exactly once');

  await admin.patchFaults({ detachPending: 'silent', detachPendingVmids: [111] });
  t.match(await kind(c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx())), {
    kind: 'Unavailable',
    message: /pending delete/,
  });
  t.same((await vm('talos-worker-1')).pendingDelete, ['scsi1'], 'the known gap reproduced: a pending delete');
  const cond = await c.controllerGetVolume({ volumeId: id }, ctx());
  t.equal(cond.status?.volumeCondition?.abnormal, true, 'reported as abnormal');
  await admin.patchFaults({ detachPending: 'error' });
  const refused = await kind(
    c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx()),
  );
  t.match(
    refused,
    { kind: 'Unavailable', message: /pending delete.*hot-unplugging/ },
    'a refused hot-unplug is retried, then reported with its reason',
  );
  await admin.patchFaults({ detachPending: 'off' });
  await c.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx());
  const w1 = await vm('talos-worker-1');
  t.notOk(w1.config.scsi1);
  t.same(w1.pendingDelete, [], 'the retry cleaned the pending delete: backups stay healthy');
  t.same(w1.pending, {});
  await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
});

t.test('errors a person can act on: privileges, authentication', async (t) => {
  const { cluster } = await start(t);
  const auditor = proxmoxController(t, { ...cluster, tokenId: AUDITOR.id, tokenSecret: AUDITOR.secret });
  t.match(await kind(auditor.createVolume(createReq('pvc-x'), ctx())), {
    kind: 'FailedPrecondition',
    message: /lacks Datastore\.AllocateSpace/,
  });
  const wrong = proxmoxController(t, { ...cluster, tokenSecret: '00000000-0000-0000-0000-000000000000' });
  t.match(await kind(wrong.createVolume(createReq('pvc-x'), ctx())), {
    kind: 'FailedPrecondition',
    message: /authentication failed/,
  });
  t.equal(await wrong.probe(AbortSignal.timeout(5000)), false);
});
