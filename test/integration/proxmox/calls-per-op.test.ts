// Proxmox API calls per CSI operation on the happy path with warm caches, counted by the
// simulator: a regression in round trips fails here, not only in the bench. The budget and why
// each call is needed: test/helpers/proxmox-call-budget.ts. Also: 24 publishes to one VM at once
// are one config change.
import t from 'tap';
import { callCtx, createReq as createVolumeReq, publishReq } from '../../helpers/csi-requests.js';
import { type BudgetedOp, PROXMOX_CALL_BUDGET } from '../../helpers/proxmox-call-budget.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';

const PARAMS = { storage: 'local-lvm', ssd: 'true', backup: 'true' };
const VM = 'talos-worker-1';
const ctx = () => callCtx(30_000);
const createReq = (name: string) => createVolumeReq(name, { parameters: PARAMS });
const pubReq = (volumeId: string) => publishReq(volumeId, VM, PARAMS);

t.test('calls per operation stay at the minimum (happy path, warm caches)', async (t) => {
  const { admin, c } = await startProxmoxOnSim(t, {
    // Every call takes a little time, as a real one does: the config task then ends while the
    // publish's task-list read is on its way (the happy path the budget counts). With none, the
    // read could reach the simulator within the 1 ms the task takes to start, and count a poll.
    sim: { faults: { taskDurationMs: 0, latencyMs: 5 } },
    // Caches stay warm for the whole test: what is counted is the operation, not a refresh. No
    // start-up window (startup-fence.ts): steady state is what is counted.
    controller: { tuning: { cacheTtlMs: 120_000, startupFenceMs: 0 } },
  });
  const publish = c.controllerPublishVolume.bind(c);
  const unpublish = c.controllerUnpublishVolume.bind(c);

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
