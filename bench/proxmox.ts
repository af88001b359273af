// Benchmark of the Proxmox controller backend against the project's simulator (HTTPS, CA pinned,
// backend `none`, 20 ms added to every API call): latency and Proxmox calls per CSI operation,
// and an attach storm of 24 volumes to one VM. Run: npx tsx bench/proxmox.ts [--runs N] [--latency MS]
// The backend is called in-process (no gRPC hop): what is measured is the driver's logic and
// its Proxmox traffic. Exits 1 when the storm has errors or misses its target (< 3x one attach).
import pino from 'pino';
import type * as T from '../src/csi/types.js';
import { createProxmoxController } from '../src/proxmox/controller/controller.js';
import { GiB } from '../src/proxmox/controller/params.js';
import { SimulatorAdmin, startSimulator } from '../sim/index.js';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const RUNS = arg('runs', 20);
const LATENCY_MS = arg('latency', 20);
const STORM = 24;
const VM = 'talos-worker-1';

const MOUNT: T.VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
  accessType: 'mount',
};
const PARAMS = { storage: 'local-lvm', ssd: 'true', backup: 'true', cache: 'writethrough' };
const ctx = (): T.CallContext => ({ log: pino({ level: 'silent' }), signal: AbortSignal.timeout(120_000) });
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

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
};
const ms = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1e6;

async function main(): Promise<number> {
  const sim = await startSimulator({ backend: 'none', faults: { latencyMs: LATENCY_MS, authFailureDelayMs: 0 } });
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
          region: sim.clusterName,
        },
      ],
      controllerVmId: 9999,
    },
    log: pino({ level: 'warn' }),
  });
  try {
    const taskMs = (await admin.faults()).taskDurationMs;
    const ops = ['CreateVolume', 'ControllerPublish', 'ControllerUnpublish', 'DeleteVolume'] as const;
    const times: Record<string, number[]> = Object.fromEntries(ops.map((o) => [o, []]));
    const calls: Record<string, number[]> = Object.fromEntries(ops.map((o) => [o, []]));
    const routes: Record<string, Record<string, number>> = {};
    const measure = async <R>(op: (typeof ops)[number], fn: () => Promise<R>): Promise<R> => {
      await admin.resetCounters();
      const t0 = process.hrtime.bigint();
      const r = await fn();
      times[op]!.push(ms(t0));
      const k = await admin.counters();
      calls[op]!.push(k.total);
      routes[op] = k.byRoute;
      return r;
    };
    // One untimed round warms the TLS connection; the caches it fills expire within the
    // runs (5 s), so the counts below include their refreshes.
    for (let i = 0; i <= RUNS; i++) {
      const name = `pvc-bench-${i}`;
      const warm = i === 0;
      const run = warm ? async <R>(_: string, fn: () => Promise<R>) => fn() : measure;
      const id = (await run('CreateVolume', () => c.createVolume(createReq(name), ctx()))).volume!.volumeId!;
      await run('ControllerPublish', () => c.controllerPublishVolume!(pubReq(id), ctx()));
      await run('ControllerUnpublish', () =>
        c.controllerUnpublishVolume!({ volumeId: id, nodeId: VM, secrets: {} }, ctx()),
      );
      await run('DeleteVolume', () => c.deleteVolume({ volumeId: id, secrets: {} }, ctx()));
    }

    // Attach storm: 24 volumes published to one VM at the same moment.
    const ids = await Promise.all(
      Array.from(
        { length: STORM },
        async (_, i) => (await c.createVolume(createReq(`pvc-storm-${i}`), ctx())).volume!.volumeId!,
      ),
    );
    const single: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t0 = process.hrtime.bigint();
      await c.controllerPublishVolume!(pubReq(ids[0]!), ctx());
      single.push(ms(t0));
      await c.controllerUnpublishVolume!({ volumeId: ids[0]!, nodeId: VM, secrets: {} }, ctx());
    }
    const one = pct(single, 50);
    await admin.resetCounters();
    const t0 = process.hrtime.bigint();
    const results = await Promise.allSettled(ids.map((id) => c.controllerPublishVolume!(pubReq(id), ctx())));
    const storm = ms(t0);
    const stormCounters = await admin.counters();
    const errors = results.filter((r) => r.status === 'rejected');
    const luns = new Set(results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.publishContext!.lun] : [])));
    await Promise.all(ids.map((id) => c.controllerUnpublishVolume!({ volumeId: id, nodeId: VM, secrets: {} }, ctx())));
    await Promise.all(ids.map((id) => c.deleteVolume({ volumeId: id, secrets: {} }, ctx())));

    const pad = (s: string | number, n: number) => String(s).padStart(n);
    console.log(
      `\nProxmox controller vs simulator: ${LATENCY_MS} ms per API call, tasks run ≥ ${taskMs} ms, ${RUNS} runs each (in-process, HTTPS, CA pinned)\n`,
    );
    console.log(
      `${'operation'.padEnd(22)}${pad('p50 ms', 9)}${pad('p95 ms', 9)}${pad('calls p50', 11)}${pad('calls max', 11)}`,
    );
    for (const op of ops) {
      console.log(
        `${op.padEnd(22)}${pad(pct(times[op]!, 50).toFixed(0), 9)}${pad(pct(times[op]!, 95).toFixed(0), 9)}${pad(pct(calls[op]!, 50), 11)}${pad(Math.max(...calls[op]!), 11)}`,
      );
    }
    console.log('\nProxmox calls of the last run, by route:');
    for (const op of ops)
      console.log(
        `  ${op}: ${Object.entries(routes[op] ?? {})
          .map(([r, n]) => `${r} ×${n}`)
          .join(', ')}`,
      );
    const ratio = storm / one;
    const configChanges = stormCounters.byRoute['POST /nodes/{node}/qemu/{vmid}/config'] ?? 0;
    console.log(`\nAttach storm: ${STORM} volumes → ${VM} at once`);
    console.log(
      `  total ${storm.toFixed(0)} ms; one attach (median of ${single.length}) ${one.toFixed(0)} ms; ratio ${ratio.toFixed(2)}x (target < 3x)`,
    );
    console.log(
      `  errors ${errors.length}; distinct slots ${luns.size}; Proxmox calls ${stormCounters.total}; config changes ${configChanges}; failed Proxmox calls ${Object.values(stormCounters.errorsByRoute).reduce((a, b) => a + b, 0)}`,
    );
    for (const e of errors.slice(0, 3)) console.log(`  error: ${e.reason}`);
    const ok = errors.length === 0 && luns.size === STORM && ratio < 3;
    console.log(ok ? '\nstorm target met' : '\nstorm target MISSED');
    return ok ? 0 : 1;
  } finally {
    await c.close();
    await sim.close();
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(e);
    process.exit(2);
  },
);
