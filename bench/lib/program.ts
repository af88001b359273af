// The program under test as its own process, run as the image runs it: image/entrypoint.sh (heap
// sized from a memory limit, the image's V8 flags) starting the esbuild bundle (dist/bundle/main.js,
// scripts/bench.sh builds it first). The memory limit is the chart's for the mode (values.yaml),
// given to the entrypoint as a cgroup file. Spawn it, wait until every socket answers Probe, read
// its memory and CPU time from /proc.
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { identityClient, probeReady } from '../../src/server/self-probe.js';
import { spawnGuarded } from '../../test/harness/reaper.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** BENCH_MAIN: another build of the program (e.g. an older commit's dist/src/main.js) to compare against. */
export const MAIN = process.env['BENCH_MAIN'] ?? path.join(ROOT, 'dist/bundle/main.js');
/** tsc's output, what the host tiers run; the bundle is made from it. */
export const COMPILED_MAIN = path.join(ROOT, 'dist/src/main.js');
const ENTRYPOINT = path.join(ROOT, 'image/entrypoint.sh');

/** The chart's memory limit (MiB) of the controller or the node plugin container. */
export function chartLimitMiB(mode: 'controller' | 'node'): number {
  const values = parseYaml(fs.readFileSync(path.join(ROOT, 'charts/pve-nfs-csi/values.yaml'), 'utf8')) as Record<
    string,
    { resources?: { limits?: { memory?: string } } } | undefined
  >;
  const m = /^(\d+)Mi$/.exec(values[mode]?.resources?.limits?.memory ?? '');
  if (!m) throw new Error(`charts/pve-nfs-csi/values.yaml: ${mode}.resources.limits.memory is not <n>Mi`);
  return Number(m[1]);
}

export function requireBuild(): void {
  if (!fs.existsSync(MAIN)) throw new Error(`${MAIN} is missing: npm run build first (scripts/bench.sh does)`);
}

export interface Program {
  child: ChildProcess;
  pid: number;
  /** ms from spawn until every endpoint answered Probe with ready. */
  readyMs: number;
  stop(): Promise<void>;
}

/** One Probe on a fresh channel (a failed connect would otherwise back off for a second). */
export async function probeOnce(endpoint: string, timeoutMs = 1000): Promise<boolean> {
  const c = identityClient(endpoint);
  try {
    return (await probeReady(c, timeoutMs)) === undefined;
  } finally {
    c.close();
  }
}

export interface StartOptions {
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
  /** The container memory limit the entrypoint sizes the heap from (default: the chart's for the mode). */
  limitMiB?: number;
  /** Replaces the entrypoint's V8 flags (PVE_NFS_CSI_NODE_FLAGS; '' for none). */
  v8Flags?: string;
  /** Plain `node [nodeArgs] <main>` without the entrypoint (e.g. the compiled dist/src as before). */
  direct?: { main: string; nodeArgs?: string[] };
}

/** Spawns the program with `args`; resolves once every unix:// endpoint answers Probe. */
export async function startProgram(args: string[], endpoints: string[], o: StartOptions = {}): Promise<Program> {
  if (!o.direct) requireBuild();
  const mode = args[args.indexOf('--mode') + 1] === 'node' ? 'node' : 'controller';
  let cgroup: string | undefined;
  let cmd: [string, string[]];
  // The bench's own NODE_OPTIONS (tsx's loader) must not reach the program.
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '', ...o.env };
  // BENCH_V8_FLAGS: every bench's program with other V8 flags, to compare ('' for V8's defaults).
  const v8Flags = o.v8Flags ?? process.env['BENCH_V8_FLAGS'];
  if (o.direct) cmd = [process.execPath, [...(o.direct.nodeArgs ?? []), o.direct.main, ...args]];
  else {
    cgroup = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-cgroup-'));
    fs.writeFileSync(path.join(cgroup, 'memory.max'), `${(o.limitMiB ?? chartLimitMiB(mode)) * 1024 * 1024}\n`);
    Object.assign(env, {
      CGROUP_ROOT: cgroup,
      PVE_NFS_CSI_MAIN: MAIN,
      // The entrypoint execs `node` from PATH: the same binary as this bench.
      PATH: `${path.dirname(process.execPath)}:${process.env['PATH'] ?? ''}`,
      ...(v8Flags !== undefined && { PVE_NFS_CSI_NODE_FLAGS: v8Flags }),
    });
    cmd = ['/bin/sh', [ENTRYPOINT, ...args]];
  }
  const t0 = process.hrtime.bigint();
  // Its own process group, killed if the bench ends first (kill -9 included: test/harness/reaper.ts).
  const child = spawnGuarded(cmd[0], cmd[1], { stdio: ['ignore', 'ignore', 'pipe'], env });
  if (cgroup) {
    const dir = cgroup;
    child.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  }
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const state = { dead: false };
  void exited.then(() => (state.dead = true));
  const deadline = Date.now() + (o.timeoutMs ?? 30_000);
  for (const ep of endpoints) {
    const sock = ep.startsWith('unix://') ? ep.slice('unix://'.length) : undefined;
    for (;;) {
      if (state.dead) throw new Error(`program exited before serving ${ep}: ${stderr.trim()}`);
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`no Probe answer on ${ep} within ${o.timeoutMs ?? 30_000} ms`);
      }
      if ((!sock || fs.existsSync(sock)) && (await probeOnce(ep))) break;
      await new Promise((r) => setTimeout(r, 2));
    }
  }
  const readyMs = Number(process.hrtime.bigint() - t0) / 1e6;
  return {
    child,
    pid: child.pid ?? -1,
    readyMs,
    async stop() {
      if (!state.dead) child.kill('SIGTERM');
      await exited;
    },
  };
}

/** Resident set size in MiB (VmRSS of /proc/<pid>/status). */
export function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

/** CPU time in ms the process has used so far, all threads (schedstat: ns on CPU). */
export function cpuMs(pid: number): number {
  let ns = 0;
  for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(fs.readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      /* thread gone */
    }
  }
  return ns / 1e6;
}
