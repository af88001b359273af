// The program under test as its own process, compiled (dist/src/main.js, what the image runs;
// scripts/bench.sh builds it first): spawn it, wait until every socket answers Probe, read its
// memory and CPU time from /proc.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { csiGrpc } from '../../src/server/proto.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** BENCH_MAIN: another build of the program (e.g. an older commit's dist/src/main.js) to compare against. */
export const MAIN = process.env['BENCH_MAIN'] ?? path.join(ROOT, 'dist/src/main.js');

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

type ProbeFn = (
  req: object,
  md: grpc.Metadata,
  o: grpc.CallOptions,
  cb: (e: grpc.ServiceError | null, r?: { ready?: { value?: boolean } | null }) => void,
) => void;

/** One Probe on a fresh channel (a failed connect would otherwise back off for a second). */
export async function probeOnce(endpoint: string, timeoutMs = 1000): Promise<boolean> {
  const c = new (csiGrpc().csi.v1.Identity)(endpoint, grpc.credentials.createInsecure());
  try {
    return await new Promise<boolean>((resolve) => {
      const probe = (c as unknown as { Probe: ProbeFn }).Probe;
      probe.call(c, {}, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, res) =>
        resolve(!err && res?.ready?.value !== false),
      );
    });
  } finally {
    c.close();
  }
}

/** Spawns the program with `args`; resolves once every unix:// endpoint answers Probe. */
export async function startProgram(
  args: string[],
  endpoints: string[],
  o: { env?: NodeJS.ProcessEnv; nodeArgs?: string[]; timeoutMs?: number } = {},
): Promise<Program> {
  requireBuild();
  const t0 = process.hrtime.bigint();
  const child = spawn(process.execPath, [...(o.nodeArgs ?? []), MAIN, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...o.env },
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
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
