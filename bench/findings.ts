// The findings metrics' Proxmox call budget, measured: the collector (src/metrics/findings.ts)
// refreshes as often as its interval and its budget allow, against the simulator's default
// cluster (3 hosts, 6 VMs) with leftover disks on it; the simulator counts every call. Prints
// the calls per minute over the window next to the budget, and one refresh's calls.
// Run: npx tsx bench/findings.ts [--budget 60] [--seconds 30] [--interval-ms 1000] [--md]
import pino from 'pino';
import { SimulatorAdmin, startSimulator } from '../sim/index.js';
import { createProxmoxController } from '../src/proxmox/controller/controller.js';
import { findingsMetrics } from '../src/metrics/findings.js';
import { benchFlags } from './lib/flags.js';

const values = benchFlags({ budget: 60, seconds: 30, 'interval-ms': 1000 });
const sim = await startSimulator({ backend: 'none', faults: { taskDurationMs: 5, authFailureDelayMs: 0 } });
const admin = new SimulatorAdmin(sim.adminUrl);
const log = pino({ level: 'silent' });
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
  log,
});
try {
  for (let i = 0; i < 6; i++) {
    await c.createVolume(
      {
        name: `pvc-0000000${i}-0000-4000-8000-000000000000`,
        capacityRange: { requiredBytes: String(2 ** 30), limitBytes: '0' },
        volumeCapabilities: [
          {
            mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
            accessMode: { mode: 'SINGLE_NODE_WRITER' },
            accessType: 'mount',
          },
        ],
        parameters: { storage: 'local-lvm' },
        secrets: {},
        volumeContentSource: null,
        accessibilityRequirements: null,
        mutableParameters: {},
      },
      { log, signal: AbortSignal.timeout(30_000) },
    );
  }
  const m = findingsMetrics({
    proxmox: c.inspect,
    kube: async () => ({ pvs: [], pvcs: [], attachments: [], classes: [] }),
    log,
    intervalMs: values['interval-ms'],
    callsPerMinute: values.budget,
  });
  await admin.resetCounters();
  const one = await m.refresh();
  await admin.resetCounters();
  const t0 = Date.now();
  m.start();
  await new Promise((r) => setTimeout(r, values.seconds * 1000));
  m.stop();
  const calls = (await admin.counters()).total;
  const minutes = (Date.now() - t0) / 60_000;
  const leftovers = m.snapshot().find((s) => s.name === 'pve_csi_findings' && s.labels.kind === 'orphan-disk');
  const rows: Array<[string, string]> = [
    ['Proxmox calls of one refresh', String(one)],
    [`calls in ${values.seconds} s (first refresh at 0 s)`, String(calls)],
    ['calls per minute, measured', (calls / minutes).toFixed(1)],
    ['budget (calls per minute)', String(values.budget)],
    ['leftover disks found', String(leftovers?.value ?? 0)],
  ];
  const md = values.md;
  if (md) process.stdout.write('| findings metrics | value |\n|---|---|\n');
  for (const [k, v] of rows) process.stdout.write(md ? `| ${k} | ${v} |\n` : `${k.padEnd(44)} ${v}\n`);
} finally {
  await c.close();
  await sim.close();
}
