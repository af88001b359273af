// The Proxmox controller over gRPC: the compiled program (controller mode) on its unix socket,
// the simulator behind it with 20 ms added to every API call. Per operation p50/p95 latency and
// Proxmox calls, next to the minimum (test/helpers/proxmox-call-budget.ts), then an attach storm
// of 24 volumes to one VM. Run: npx tsx bench/proxmox-grpc.ts [--runs N] [--latency MS] [--md]
import { SimulatorAdmin, startSimulator } from '../sim/index.js';
import type { VolumeCapability } from '../test/helpers/csi-client.js';
import { PROXMOX_CALL_BUDGET, type BudgetedOp } from '../test/helpers/proxmox-call-budget.js';
import { benchFlags } from './lib/flags.js';
import { startProxmoxController } from './lib/proxmox-controller.js';
import { type Breakdown, breakdown, breakdownRows } from './lib/call-breakdown.js';
import { printTable, since, type Row } from './lib/table.js';

const values = benchFlags({ runs: 20, latency: 20, task: 5 });
const RUNS = values.runs;
const LATENCY = values.latency;
const STORM = 24;
const VM = 'talos-worker-1';
const GiB = 2 ** 30;
const MOUNT: VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
};
const PARAMS = { storage: 'local-lvm', ssd: 'true', backup: 'true' };
const TOPO = {
  requisite: [],
  preferred: [{ segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper1' } }],
};

const sim = await startSimulator({
  backend: 'none',
  faults: { latencyMs: LATENCY, taskDurationMs: values.task, authFailureDelayMs: 0 },
});
const admin = new SimulatorAdmin(sim.adminUrl);
const ctrl = await startProxmoxController(sim, { tmpPrefix: 'bench-pve-grpc-', callTimeoutMs: 120_000 });
const { c } = ctrl;
try {
  // Past the start-up window (startup-fence.ts: 12 s after a start, publishes look for a killed
  // predecessor's running tasks): steady state is what is measured.
  await new Promise((r) => setTimeout(r, 12_500));
  const ops: BudgetedOp[] = ['CreateVolume', 'ControllerPublishVolume', 'ControllerUnpublishVolume', 'DeleteVolume'];
  const ms = new Map<BudgetedOp, number[]>(ops.map((o) => [o, []]));
  const calls = new Map<BudgetedOp, number[]>(ops.map((o) => [o, []]));
  const parts = new Map<BudgetedOp, Breakdown[]>(ops.map((o) => [o, []]));
  const run = async <R>(op: BudgetedOp, count: boolean, fn: () => Promise<R>): Promise<R> => {
    if (count) await admin.resetCounters();
    const start = Date.now();
    const t0 = process.hrtime.bigint();
    const r = await fn();
    if (count) {
      const total = since(t0);
      ms.get(op)?.push(total);
      calls.get(op)?.push((await admin.counters()).total);
      // The counters' reset also emptied the request log: what it holds now is this operation.
      parts.get(op)?.push(breakdown(start, total, (await admin.requests()).entries, LATENCY));
    }
    return r;
  };
  for (let i = 0; i <= RUNS; i++) {
    const count = i > 0; // one untimed round warms the connection and the caches
    const v = await run('CreateVolume', count, () =>
      c.controller.CreateVolume({
        name: `pvc-grpc-${i}`,
        capacityRange: { requiredBytes: String(GiB) },
        volumeCapabilities: [MOUNT],
        parameters: PARAMS,
        accessibilityRequirements: TOPO,
      }),
    );
    const volumeId = v.volume?.volumeId ?? '';
    await run('ControllerPublishVolume', count, () =>
      c.controller.ControllerPublishVolume({ volumeId, nodeId: VM, volumeCapability: MOUNT, volumeContext: PARAMS }),
    );
    await run('ControllerUnpublishVolume', count, () =>
      c.controller.ControllerUnpublishVolume({ volumeId, nodeId: VM }),
    );
    await run('DeleteVolume', count, () => c.controller.DeleteVolume({ volumeId }));
  }
  const rows: Row[] = ops.map((op) => ({
    what: op,
    samples: ms.get(op) ?? [],
    min: PROXMOX_CALL_BUDGET[op] * LATENCY,
    note: `minimum = ${PROXMOX_CALL_BUDGET[op]} calls × ${LATENCY} ms`,
  }));
  const callRows: Row[] = ops.map((op) => ({
    what: op,
    samples: calls.get(op) ?? [],
    min: PROXMOX_CALL_BUDGET[op],
    note: 'Proxmox API calls (simulator counters)',
  }));

  const ids = await Promise.all(
    Array.from(
      { length: STORM },
      async (_, i) =>
        (
          await c.controller.CreateVolume({
            name: `pvc-grpc-storm-${i}`,
            capacityRange: { requiredBytes: String(GiB) },
            volumeCapabilities: [MOUNT],
            parameters: PARAMS,
            accessibilityRequirements: TOPO,
          })
        ).volume?.volumeId ?? '',
    ),
  );
  await admin.resetCounters();
  const t0 = process.hrtime.bigint();
  const res = await Promise.allSettled(
    ids.map((volumeId) =>
      c.controller.ControllerPublishVolume({ volumeId, nodeId: VM, volumeCapability: MOUNT, volumeContext: PARAMS }),
    ),
  );
  const storm = since(t0);
  const k = await admin.counters();
  const ok = res.filter((r) => r.status === 'fulfilled').length;
  // Every publish of the storm must get a slot of its own: a storm that shares slots is no result.
  const luns = new Set(res.flatMap((r) => (r.status === 'fulfilled' ? [r.value.publishContext.lun] : [])));
  rows.push({
    what: `attach storm of ${STORM} (${ok} OK)`,
    samples: [storm],
    min: PROXMOX_CALL_BUDGET.ControllerPublishVolume * LATENCY,
    note: 'all at once to one VM; minimum = one publish',
  });
  callRows.push({
    what: `attach storm of ${STORM}`,
    samples: [k.total],
    min: PROXMOX_CALL_BUDGET.ControllerPublishVolume,
    note: `config changes: ${k.byRoute['POST /nodes/{node}/qemu/{vmid}/config'] ?? 0}; distinct slots: ${luns.size}`,
  });
  await Promise.all(ids.map((volumeId) => c.controller.ControllerUnpublishVolume({ volumeId, nodeId: VM })));
  await Promise.all(ids.map((volumeId) => c.controller.DeleteVolume({ volumeId })));

  printTable({
    title: `Proxmox controller over gRPC (compiled program, unix socket), simulator +${LATENCY} ms per API call, tasks ≥ ${values.task} ms, ${RUNS} runs`,
    unit: 'ms',
    rows,
  });
  printTable({ title: 'Proxmox API calls per operation (happy path, caches warm)', unit: 'calls', rows: callRows });
  printTable({
    title: `Where the time goes (simulator request log; ms resolution): the injected ${LATENCY} ms per call, the simulator's own work (e.g. waiting for a task), and everything outside the simulator (gRPC, the controller, HTTPS) before the first call, between calls and after the last`,
    unit: 'ms',
    rows: ops.flatMap((op) => breakdownRows(op, parts.get(op) ?? [])),
  });
} finally {
  await ctrl.close();
  await sim.close();
}
