// `npm run chaos [-- --long] [-- --only storm,kill,snapshots,cancel,nfs,nfs-snapshots,input]`
// The chaos suite: the real program over gRPC, called the way the CSI sidecars call it, while
// the Proxmox simulator injects faults, the controller is killed with SIGKILL, callers give up,
// the NFS server is frozen and killed, the NFS controller is killed inside its copies, and every RPC of both drivers gets hostile input. After
// each scenario an audit reads the simulator's state, the export and the mount table. Prints one
// table; exits non-zero on any violation (each one is listed under the table).
import fs from 'node:fs';
import path from 'node:path';
import { stopAll } from '../harness/procs.js';
import { startEnv, type ChaosEnv } from './env.js';
import { ROOT, programEntry } from './program.js';
import type { Recorder } from './rpc.js';
import { faultStorm } from './storm.js';
import { killScenario } from './kill.js';
import { snapshotScenario } from './snapshots.js';
import { cancelScenario } from './cancel.js';
import { nfsScenario, type NfsShared } from './nfs.js';
import { nfsSnapshotScenario } from './nfs-snapshots.js';
import { badInput } from './bad-input.js';

const argv = process.argv.slice(2);
const long = argv.includes('--long');
// --only=a,b or --only a,b
const onlyAt = argv.findIndex((a) => a.startsWith('--only'));
const onlyArg = argv[onlyAt];
const onlyValue =
  onlyArg === undefined
    ? undefined
    : onlyArg.includes('=')
      ? onlyArg.slice(onlyArg.indexOf('=') + 1)
      : argv[onlyAt + 1];
if (onlyArg !== undefined && onlyValue === undefined) throw new Error('--only: expected a list of scenarios');
const only = onlyValue?.split(',');
const want = (s: string) => !only || only.includes(s);

const runDir = path.join(ROOT, '.run', 'chaos');
fs.rmSync(runDir, { recursive: true, force: true });
fs.mkdirSync(runDir, { recursive: true });

function fmtCounts(c: Record<string, number>): string {
  const e = Object.entries(c).sort((a, b) => b[1] - a[1]);
  return e.length ? e.map(([k, v]) => `${k} ${v}`).join(', ') : '-';
}

function table(rows: { rec: Recorder; seconds: number }[]): string {
  const head = [
    'scenario',
    'ops',
    'calls',
    'faults injected',
    'answers by code',
    'leaks',
    'double attaches',
    'longest call',
    'time',
    'violations',
  ];
  const body = rows.map(({ rec, seconds }) => [
    rec.scenario,
    String(rec.ops),
    String(rec.calls),
    fmtCounts(rec.faults),
    fmtCounts(rec.codes),
    Object.values(rec.leaks).reduce((a, b) => a + b, 0) === 0 ? '0' : fmtCounts(rec.leaks),
    String(rec.doubleAttaches),
    `${(rec.longestMs / 1000).toFixed(2)} s (${rec.longestWhat})`,
    `${seconds.toFixed(0)} s`,
    String(rec.violations.length),
  ]);
  const lines = [head, ...body].map((r) => `| ${r.join(' | ')} |`);
  lines.splice(1, 0, `|${head.map(() => '---').join('|')}|`);
  return lines.join('\n');
}

async function main(): Promise<number> {
  const t0 = Date.now();
  const env: ChaosEnv = await startEnv(runDir, long);
  console.log(
    `program: node ${programEntry()
      .map((p) => path.relative(ROOT, p) || p)
      .join(' ')}`,
  );
  const nfs: NfsShared = { runDir };
  const rows: { rec: Recorder; seconds: number }[] = [];
  const scenarios: [string, () => Promise<Recorder>][] = [
    ['storm', () => faultStorm(env)],
    ['kill', () => killScenario(env)],
    ['snapshots', () => snapshotScenario(env)],
    ['cancel', () => cancelScenario(env)],
    ['nfs', () => nfsScenario(env, nfs)],
    ['nfs-snapshots', () => nfsSnapshotScenario(env, nfs)],
    ['input', () => badInput(env, nfs)],
  ];
  try {
    for (const [key, run] of scenarios) {
      if (!want(key)) continue;
      const s0 = Date.now();
      process.stdout.write(`--- ${key}: running\n`);
      const rec = await run();
      const seconds = (Date.now() - s0) / 1000;
      rows.push({ rec, seconds });
      process.stdout.write(`--- ${key}: ${rec.violations.length} violation(s), ${seconds.toFixed(1)} s\n`);
    }
  } finally {
    await stopAll();
    await nfs.ganesha?.stop().catch(() => undefined);
    await env.sim.close();
  }
  console.log(
    `\nchaos suite (${long ? 'long' : 'bounded'} run, ${((Date.now() - t0) / 1000).toFixed(0)} s; logs in ${path.relative(process.cwd(), runDir)})\n`,
  );
  console.log(table(rows));
  const violations = rows.flatMap(({ rec }) => rec.violations.map((v) => `${rec.scenario}: ${v}`));
  fs.writeFileSync(path.join(runDir, 'violations.txt'), violations.map((v) => `${v}\n`).join(''));
  if (violations.length) {
    console.log(
      `\n${violations.length} violation(s) (all of them in ${path.relative(process.cwd(), runDir)}/violations.txt):`,
    );
    const shown = violations.slice(0, 60);
    for (const v of shown) console.log(`  - ${v}`);
    if (violations.length > shown.length) console.log(`  … and ${violations.length - shown.length} more`);
    return 1;
  }
  console.log('\n0 violations');
  return 0;
}

main().then(
  (code) => process.exit(code),
  async (err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : err);
    await stopAll();
    process.exit(1);
  },
);
