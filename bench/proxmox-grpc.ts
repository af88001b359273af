// The Proxmox controller over gRPC: the compiled program (controller mode) on its unix socket,
// the simulator behind it with 20 ms added to every API call. Per operation p50/p95/p99 latency
// and Proxmox calls, next to the minimum (test/helpers/proxmox-call-budget.ts), at two task
// durations (5 and 50 ms) whose rounds alternate on the same program and simulator, so both see
// the same machine; then an attach storm of 24 volumes to one VM at each. Calls beyond the
// budget are listed by route: a background refresh (a cached view re-read ahead of expiry) is
// counted there though no request waits for it.
// Run: npx tsx bench/proxmox-grpc.ts [--runs N] [--latency MS] [--task MS (one duration only)] [--md]
import { SimulatorAdmin, startSimulator } from '../sim/index.js';
import { createHttpProxmoxApi } from '../src/proxmox/api/http-api.js';
import { clusterOf } from '../test/helpers/proxmox-on-sim.js';
import type { VolumeCapability } from '../test/helpers/csi-client.js';
import { PROXMOX_CALL_BUDGET, type BudgetedOp } from '../test/helpers/proxmox-call-budget.js';
import { benchFlags } from './lib/flags.js';
import { startProxmoxController } from './lib/proxmox-controller.js';
import { type Breakdown, breakdown, breakdownRows } from './lib/call-breakdown.js';
import { pct, printTable, since, type Row } from './lib/table.js';

const values = benchFlags({ runs: 40, latency: 20, task: 0 });
const TASKS = values.task > 0 ? [values.task] : [5, 50];
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
  faults: { latencyMs: LATENCY, taskDurationMs: TASKS[0] ?? 5, authFailureDelayMs: 0 },
});
const admin = new SimulatorAdmin(sim.adminUrl);
const ctrl = await startProxmoxController(sim, { tmpPrefix: 'bench-pve-grpc-', callTimeoutMs: 120_000 });
const { c } = ctrl;
// The physical minimum of each operation, measured beside it: the same number of sequential
// round trips to the simulator (GET /version through the controller's own client, so the same
// +LATENCY and HTTPS), plus the task's duration where the operation must outwait a task. Its
// p95 / p50 is what the machine's scheduling alone does to a chain of that shape at this load.
const raw = createHttpProxmoxApi({ cluster: clusterOf(sim) });
/** Rounds on the critical path, and whether a task is outwaited after the last. */
const FLOOR: Record<BudgetedOp, { rounds: number; task: boolean }> = {
  CreateVolume: { rounds: 2, task: false }, // the pool guard's fill read, the allocation
  // the other VMs' and the VM's own entries, the config change, the task list (task ends by then at 5 ms)
  ControllerPublishVolume: { rounds: 4, task: true },
  ControllerUnpublishVolume: { rounds: 2, task: false }, // the VM's entries, the synchronous unlink
  // the VM list, every VM's entries and snapshots at once, the free that answers when its task ended
  DeleteVolume: { rounds: 3, task: true },
};
const floor = async (op: BudgetedOp, task: number): Promise<number> => {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < FLOOR[op].rounds; i++) await raw.version();
  // Publish: the task list is read one round after the change, so only what is left of the task is waited for.
  const wait = FLOOR[op].task ? (op === 'DeleteVolume' ? task : Math.max(0, task - LATENCY)) : 0;
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  return since(t0);
};
try {
  // Past the start-up window (startup-fence.ts: 12 s after a start, publishes look for a killed
  // predecessor's running tasks): steady state is what is measured.
  await new Promise((r) => setTimeout(r, 12_500));
  const ops: BudgetedOp[] = ['CreateVolume', 'ControllerPublishVolume', 'ControllerUnpublishVolume', 'DeleteVolume'];
  const key = (task: number, op: BudgetedOp) => `${task}\u0000${op}`;
  const ms = new Map<string, number[]>();
  const calls = new Map<string, number[]>();
  const parts = new Map<string, Breakdown[]>();
  const floors = new Map<string, number[]>();
  /** Per task duration and operation: routes called beyond the happy path's, summed over the runs. */
  const extra = new Map<string, Map<string, number>>();
  const push = <V>(m: Map<string, V[]>, k: string, v: V) => m.set(k, [...(m.get(k) ?? []), v]);
  const run = async <R>(task: number, op: BudgetedOp, count: boolean, fn: () => Promise<R>): Promise<R> => {
    if (count) await admin.resetCounters();
    const start = Date.now();
    const t0 = process.hrtime.bigint();
    const r = await fn();
    if (count) {
      const total = since(t0);
      const k = key(task, op);
      push(ms, k, total);
      const counted = await admin.counters();
      push(calls, k, counted.total);
      if (counted.total > PROXMOX_CALL_BUDGET[op]) {
        const e = extra.get(k) ?? new Map<string, number>();
        for (const [route, n] of Object.entries(counted.byRoute)) e.set(route, (e.get(route) ?? 0) + n);
        extra.set(k, e);
      }
      // The counters' reset also emptied the request log: what it holds now is this operation.
      push(parts, k, breakdown(start, total, (await admin.requests()).entries, LATENCY));
      push(floors, k, await floor(op, task));
    }
    return r;
  };
  const cycle = async (task: number, name: string, count: boolean) => {
    await admin.patchFaults({ taskDurationMs: task });
    const v = await run(task, 'CreateVolume', count, () =>
      c.controller.CreateVolume({
        name,
        capacityRange: { requiredBytes: String(GiB) },
        volumeCapabilities: [MOUNT],
        parameters: PARAMS,
        accessibilityRequirements: TOPO,
      }),
    );
    const volumeId = v.volume?.volumeId ?? '';
    await run(task, 'ControllerPublishVolume', count, () =>
      c.controller.ControllerPublishVolume({ volumeId, nodeId: VM, volumeCapability: MOUNT, volumeContext: PARAMS }),
    );
    await run(task, 'ControllerUnpublishVolume', count, () =>
      c.controller.ControllerUnpublishVolume({ volumeId, nodeId: VM }),
    );
    await run(task, 'DeleteVolume', count, () => c.controller.DeleteVolume({ volumeId }));
  };
  for (let i = 0; i <= RUNS; i++) {
    // One untimed round warms the connection and the caches; the durations alternate which goes first.
    const order = i % 2 === 0 ? TASKS : [...TASKS].reverse();
    for (const task of order) await cycle(task, `pvc-grpc-${task}-${i}`, i > 0);
  }

  const rows: Row[] = [];
  const callRows: Row[] = [];
  for (const task of TASKS) {
    for (const op of ops) {
      const f = floors.get(key(task, op)) ?? [];
      rows.push({
        what: `${op}, tasks ${task} ms`,
        samples: ms.get(key(task, op)) ?? [],
        min: pct(f, 50),
        note: `${PROXMOX_CALL_BUDGET[op]} calls in ${FLOOR[op].rounds} rounds`,
      });
      rows.push({
        what: `  minimum: ${FLOOR[op].rounds} rounds${FLOOR[op].task ? ' + task' : ''}`,
        samples: f,
        note: 'measured right after each run',
      });
      const e = extra.get(key(task, op));
      callRows.push({
        what: `${op}, tasks ${task} ms`,
        samples: calls.get(key(task, op)) ?? [],
        min: PROXMOX_CALL_BUDGET[op],
        note: e
          ? `runs over the budget called: ${[...e].map(([r, n]) => `${r} ×${n}`).join(', ')}`
          : 'Proxmox API calls (simulator counters)',
      });
    }
  }

  for (const task of TASKS) {
    await admin.patchFaults({ taskDurationMs: task });
    const ids = await Promise.all(
      Array.from(
        { length: STORM },
        async (_, i) =>
          (
            await c.controller.CreateVolume({
              name: `pvc-grpc-storm-${task}-${i}`,
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
      what: `attach storm of ${STORM} (${ok} OK), tasks ${task} ms`,
      samples: [storm],
      min: PROXMOX_CALL_BUDGET.ControllerPublishVolume * LATENCY,
      note: 'all at once to one VM; minimum = one publish',
    });
    callRows.push({
      what: `attach storm of ${STORM}, tasks ${task} ms`,
      samples: [k.total],
      min: PROXMOX_CALL_BUDGET.ControllerPublishVolume,
      note: `config changes: ${k.byRoute['POST /nodes/{node}/qemu/{vmid}/config'] ?? 0}; distinct slots: ${luns.size}`,
    });
    await Promise.all(ids.map((volumeId) => c.controller.ControllerUnpublishVolume({ volumeId, nodeId: VM })));
    await Promise.all(ids.map((volumeId) => c.controller.DeleteVolume({ volumeId })));
  }

  printTable({
    title: `Proxmox controller over gRPC (compiled program, unix socket), simulator +${LATENCY} ms per API call, tasks ${TASKS.join(' / ')} ms alternating, ${RUNS} runs each`,
    unit: 'ms',
    rows,
    tail: true,
  });
  printTable({ title: 'Proxmox API calls per operation (happy path, caches warm)', unit: 'calls', rows: callRows });
  printTable({
    title: `Where the time goes (simulator request log; ms resolution): the injected ${LATENCY} ms per call, the simulator's own work (e.g. waiting for a task), and everything outside the simulator (gRPC, the controller, HTTPS) before the first call, between calls and after the last`,
    unit: 'ms',
    rows: TASKS.flatMap((task) =>
      ops.flatMap((op) => breakdownRows(`${op}, tasks ${task} ms`, parts.get(key(task, op)) ?? [])),
    ),
  });
} finally {
  await raw.close();
  await ctrl.close();
  await sim.close();
}
