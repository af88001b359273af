// Proxmox API calls per CSI operation on the happy path with warm caches, counted by the
// simulator: a regression in round trips fails here, not only in the bench. The budget and why
// each call is needed: test/helpers/proxmox-call-budget.ts. Also: 24 publishes to one VM at once
// are one config change.
import t from 'tap';
import pino from 'pino';
import type * as T from '../../../src/csi/types.js';
import { createProxmoxController } from '../../../src/proxmox/controller/controller.js';
import { GiB } from '../../../src/proxmox/controller/params.js';
import { SimulatorAdmin, startSimulator } from '../../../sim/index.js';
import { type BudgetedOp, PROXMOX_CALL_BUDGET } from '../../helpers/proxmox-call-budget.js';

const MOUNT: T.VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
  accessType: 'mount',
};
const PARAMS = { storage: 'local-lvm', ssd: 'true', backup: 'true' };
const VM = 'talos-worker-1';
const ctx = (): T.CallContext => ({ log: pino({ level: 'silent' }), signal: AbortSignal.timeout(30_000) });
const createReq = (name: string): T.CreateVolumeRequest => ({
  name,
  capacityRange: { requiredBytes: String(GiB), limitBytes: '0' },
  volumeCapabilities: [MOUNT],
  parameters: PARAMS,
  secrets: {},
  volumeContentSource: null,
  mutableParameters: {},
  accessibilityRequirements: {
    requisite: [],
    preferred: [{ segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper1' } }],
  },
});
const pubReq = (volumeId: string): T.ControllerPublishVolumeRequest => ({
  volumeId,
  nodeId: VM,
  volumeCapability: MOUNT,
  readonly: false,
  secrets: {},
  volumeContext: PARAMS,
});

t.test('calls per operation stay at the minimum (happy path, warm caches)', async (t) => {
  const sim = await startSimulator({ backend: 'none', faults: { authFailureDelayMs: 0, taskDurationMs: 0 } });
  t.teardown(() => sim.close());
  const admin = new SimulatorAdmin(sim.adminUrl);
  const c = createProxmoxController({
    config: {
      clusters: [
        {
          url: sim.url,
          insecure: false,
          caFile: sim.caFile,
          tokenId: sim.tokenId,
          tokenSecret: sim.tokenSecret,
          region: 'homelab',
        },
      ],
      controllerVmId: 9999,
    },
    // Caches stay warm for the whole test: what is counted is the operation, not a refresh. No
    // start-up window (startup-fence.ts): steady state is what is counted.
    log: pino({ level: 'silent' }),
    tuning: { cacheTtlMs: 120_000, startupFenceMs: 0 },
  });
  t.teardown(() => c.close());
  const { controllerPublishVolume, controllerUnpublishVolume } = c;
  if (!controllerPublishVolume || !controllerUnpublishVolume) throw new Error('the Proxmox controller publishes');
  const publish = controllerPublishVolume.bind(c);
  const unpublish = controllerUnpublishVolume.bind(c);

  const measured: Array<[BudgetedOp, number, Record<string, number>]> = [];
  const cycle = async (name: string, count: boolean) => {
    const run = async <R>(op: BudgetedOp, fn: () => Promise<R>): Promise<R> => {
      if (count) await admin.resetCounters();
      const r = await fn();
      if (count) {
        const k = await admin.counters();
        measured.push([op, k.total, k.byRoute]);
      }
      return r;
    };
    const id = (await run('CreateVolume', () => c.createVolume(createReq(name), ctx()))).volume?.volumeId ?? '';
    await run('ControllerPublishVolume', () => publish(pubReq(id), ctx()));
    await run('ControllerUnpublishVolume', () => unpublish({ volumeId: id, nodeId: VM, secrets: {} }, ctx()));
    await run('DeleteVolume', () => c.deleteVolume({ volumeId: id, secrets: {} }, ctx()));
  };
  await cycle('pvc-warm', false);
  await cycle('pvc-counted', true);
  for (const [op, calls, routes] of measured) {
    const budget = PROXMOX_CALL_BUDGET[op];
    t.ok(
      calls <= budget,
      `${op}: ${calls} Proxmox calls, minimum ${budget} (${Object.entries(routes)
        .map(([r, n]) => `${r} ×${n}`)
        .join(', ')})`,
    );
  }

  // The attach storm: 24 publishes to one VM at the same moment are merged into one change.
  const ids = await Promise.all(
    Array.from(
      { length: 24 },
      async (_, i) => (await c.createVolume(createReq(`pvc-storm-${i}`), ctx())).volume?.volumeId ?? '',
    ),
  );
  await admin.resetCounters();
  const luns = await Promise.all(ids.map(async (id) => (await publish(pubReq(id), ctx())).publishContext?.lun));
  const k = await admin.counters();
  t.equal(new Set(luns).size, 24, 'every volume got its own slot');
  t.equal(
    k.byRoute['POST /nodes/{node}/qemu/{vmid}/config'] ?? 0,
    1,
    `one config change for 24 attaches (${k.total} calls)`,
  );
  t.ok(
    k.total <= PROXMOX_CALL_BUDGET.ControllerPublishVolume,
    `the storm costs no more calls than one publish: ${k.total}`,
  );
  await Promise.all(ids.map((id) => unpublish({ volumeId: id, nodeId: VM, secrets: {} }, ctx())));
  await Promise.all(ids.map((id) => c.deleteVolume({ volumeId: id, secrets: {} }, ctx())));
});
