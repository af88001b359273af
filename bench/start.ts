// Start time: spawn of the program as the image runs it (image/entrypoint.sh starting the bundle,
// bench/lib/program.ts) → every socket it serves answers Probe, for the controller and the node
// plugin with the NFS driver, the Proxmox driver and both. The minimum is Node.js itself (spawn →
// exit of an empty script); the goal is ≤ 100 ms (docs/performance.md; bench/results/2026-12-01-start-memory-node-path.md);
// upstream's Go drivers answer their first Probe 29-38 ms after spawn. Also the program's CPU
// time at that moment (less sensitive to a busy machine than wall time).
//   npx tsx bench/start.ts [--runs N] [--json] [--md]
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { freePort } from '../test/helpers/free-port.js';
import { cpuMs, startProgram } from './lib/program.js';
import { printTable, type Row } from './lib/table.js';

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '10' },
    json: { type: 'boolean', default: false },
    md: { type: 'boolean', default: false },
  },
});
const RUNS = Number(values.runs);

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-start-'));
try {
  // Nothing listens on this port: starting must not need Proxmox (a round trip would show here as a hang).
  const cfg = path.join(dir, 'proxmox.yaml');
  fs.writeFileSync(
    cfg,
    `clusters:\n  - url: https://127.0.0.1:${await freePort()}/api2/json\n    insecure: true\n    token_id: "bench@pve!csi"\n    token_secret: "0b6e8a9c-1c2d-4e5f-8a9b-0c1d2e3f4a5b"\n    region: bench\n`,
  );
  const kubelet = path.join(dir, 'kubelet');
  fs.mkdirSync(kubelet);

  const bare: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = process.hrtime.bigint();
    spawnSync(process.execPath, ['-e', '0']);
    bare.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const minimum = bare.sort((a, b) => a - b)[Math.floor(bare.length / 2)] ?? 0;

  const rows: Row[] = [];
  const cpuRows: Row[] = [];
  const json: Record<string, { wallMs: number[]; cpuMs: number[] }> = {};
  for (const mode of ['controller', 'node'] as const) {
    for (const drivers of ['nfs', 'proxmox', 'both'] as const) {
      const wall: number[] = [];
      const cpu: number[] = [];
      for (let i = 0; i < RUNS; i++) {
        const args = ['--mode', mode, '--node-id', 'bench-node', '--kubelet-dir', kubelet, '--log-level', 'warn'];
        const eps: string[] = [];
        if (drivers !== 'nfs') {
          const ep = `unix://${dir}/px-${mode}-${i}.sock`;
          args.push('--proxmox-endpoint', ep, ...(mode === 'controller' ? ['--proxmox-config', cfg] : []));
          eps.push(ep);
        }
        if (drivers !== 'proxmox') {
          const ep = `unix://${dir}/nfs-${mode}-${i}.sock`;
          args.push('--nfs-endpoint', ep);
          eps.push(ep);
        }
        const p = await startProgram(args, eps);
        cpu.push(cpuMs(p.pid));
        wall.push(p.readyMs);
        await p.stop();
      }
      const what = `${mode}, ${drivers === 'both' ? 'both drivers' : drivers}`;
      json[what] = { wallMs: wall, cpuMs: cpu };
      rows.push({ what, samples: wall, min: minimum, note: 'goal ≤ 100; upstream Go: 29–38' });
      cpuRows.push({ what, samples: cpu });
    }
  }
  if (values.json) console.log(JSON.stringify({ runs: RUNS, nodeBareMs: minimum, ...json }));
  else {
    printTable({
      title: `Start: spawn → Probe OK on every socket (${RUNS} runs each; minimum = node -e 0, spawn → exit)`,
      unit: 'ms',
      rows,
    });
    printTable({ title: 'Start: CPU time used by then (all threads)', unit: 'ms', rows: cpuRows });
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
