// Child processes for the orchestration scripts (sanity, demo, VM tier): started in their own
// process group, their output kept in a log file, waited on for a "ready" JSON line, and always
// killed on exit, Ctrl-C or failure so nothing is left running (on kill -9 of this process too:
// test/harness/reaper.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { defined } from '../../src/defined.js';
import { spawnGuarded } from './reaper.js';

/** A JSON object line of a child's stdout. */
export type JsonLine = Record<string, unknown>;

export interface Proc {
  name: string;
  child: ChildProcess;
  logFile: string;
  /**
   * Resolves with the first stdout line that parses as a JSON object and satisfies `match`; `T`
   * is the shape the caller's `match` vouches for.
   */
  readyJson<T extends JsonLine = JsonLine>(match: (j: JsonLine) => boolean, timeoutMs: number): Promise<T>;
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<number | null>;
}

const live = new Set<Proc>();
let hooked = false;
function hookExit(): void {
  if (hooked) return;
  hooked = true;
  const killAll = () => {
    for (const p of live) {
      killGroup(p.child, 'SIGKILL');
    }
  };
  process.on('exit', killAll);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(sig, () => {
      void stopAll().finally(() => process.exit(130));
    });
  }
}

/** Signals a child's whole process group; a child that never started, or is gone, is left alone. */
function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    /* gone */
  }
}

export async function stopAll(): Promise<void> {
  await Promise.all([...live].map((p) => p.stop()));
}

export function start(
  name: string,
  cmd: string,
  args: string[],
  opts: { logFile: string; env?: NodeJS.ProcessEnv; cwd?: string; echo?: boolean },
): Proc {
  hookExit();
  const out = fs.openSync(opts.logFile, 'a');
  // Its own process group, killed by test/harness/reaper.sh if this process dies first (kill -9).
  const child = spawnGuarded(cmd, args, {
    cwd: opts.cwd,
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', out],
  });
  let buf = '';
  const waiters: { match: (j: JsonLine) => boolean; resolve: (j: JsonLine) => void }[] = [];
  defined(child.stdout, `${name}'s stdout pipe`).on('data', (d: Buffer) => {
    fs.appendFileSync(opts.logFile, d);
    if (opts.echo) process.stdout.write(d);
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (!line.startsWith('{')) continue;
      try {
        const parsed: unknown = JSON.parse(line);
        if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) continue;
        const j = parsed as JsonLine;
        for (const w of [...waiters])
          if (w.match(j)) {
            waiters.splice(waiters.indexOf(w), 1);
            w.resolve(j);
          }
      } catch {
        /* not JSON */
      }
    }
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const proc: Proc = {
    name,
    child,
    logFile: opts.logFile,
    readyJson<T extends JsonLine>(match: (j: JsonLine) => boolean, timeoutMs: number) {
      return new Promise<T>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`${name} not ready after ${timeoutMs} ms; see ${opts.logFile}`)),
          timeoutMs,
        );
        void exited.then((code) =>
          reject(new Error(`${name} exited with ${code} before it was ready; see ${opts.logFile}`)),
        );
        waiters.push({
          match,
          resolve: (j) => {
            clearTimeout(timer);
            // The caller's `match` vouched for the shape it names as T.
            resolve(j as T);
          },
        });
      });
    },
    async stop(signal = 'SIGTERM', graceMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) {
        live.delete(proc);
        return child.exitCode;
      }
      killGroup(child, signal);
      const timer = setTimeout(() => killGroup(child, 'SIGKILL'), graceMs);
      const code = await exited;
      clearTimeout(timer);
      live.delete(proc);
      return code;
    },
  };
  live.add(proc);
  return proc;
}

/** Runs a command to completion, inheriting stdio; resolves with its exit code. */
export function run(
  cmd: string,
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; cwd?: string; stdoutFile?: string } = {},
): Promise<number> {
  return new Promise((resolve) => {
    const out = opts.stdoutFile ? fs.openSync(opts.stdoutFile, 'w') : 'inherit';
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', out, out],
    });
    child.on('exit', (code, sig) => resolve(code ?? (sig ? 128 : 1)));
  });
}
