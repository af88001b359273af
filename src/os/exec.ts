// Exec port: run a command with a hard upper bound on its lifetime.
// The adapter starts every command in its own process group so a timeout or a cancelled call can
// kill the whole tree (mount → mount.nfs, sh → sleep), not just the direct child.
import { spawn } from 'node:child_process';

export interface ExecOptions {
  /** Kill the process group after this many ms. Default: the adapter's defaultTimeoutMs. */
  timeoutMs?: number | undefined;
  /** Kill the process group when this aborts (client cancelled the RPC). */
  signal?: AbortSignal | undefined;
  /** Written to stdin; without it stdin is /dev/null, so nothing can ever prompt and wait. */
  input?: string | undefined;
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

export interface Exec {
  /** Resolves on exit code 0; otherwise rejects with a CommandError. */
  run(file: string, args: readonly string[], opts?: ExecOptions): Promise<ExecResult>;
}

export type CommandFailure = 'exit' | 'timeout' | 'aborted' | 'spawn';

/** A command that did not succeed, with what it printed so callers and people can see why. */
export class CommandError extends Error {
  readonly command: string;
  readonly args: readonly string[];
  readonly reason: CommandFailure;
  readonly exitCode: number | undefined;
  readonly stdout: string;
  readonly stderr: string;

  constructor(init: {
    command: string;
    args: readonly string[];
    reason: CommandFailure;
    exitCode?: number | undefined;
    stdout?: string;
    stderr?: string;
    detail?: string | undefined;
  }) {
    const cmdline = [init.command, ...init.args].join(' ');
    const stderr = (init.stderr ?? '').trim();
    let what: string;
    switch (init.reason) {
      case 'exit':
        what = `failed with exit code ${init.exitCode}`;
        break;
      case 'timeout':
        what = `did not finish ${init.detail ?? 'in time'} and was killed`;
        break;
      case 'aborted':
        what = 'was cancelled and killed';
        break;
      case 'spawn':
        what = `could not be started (${init.detail ?? 'unknown error'})`;
    }
    super(`${cmdline} ${what}${stderr ? `: ${stderr}` : ''}`);
    this.name = 'CommandError';
    this.command = init.command;
    this.args = init.args;
    this.reason = init.reason;
    this.exitCode = init.exitCode;
    this.stdout = init.stdout ?? '';
    this.stderr = stderr;
  }
}

export function isCommandError(e: unknown, reason?: CommandFailure): e is CommandError {
  return e instanceof CommandError && (reason === undefined || e.reason === reason);
}

export interface CreateExecOptions {
  defaultTimeoutMs?: number;
  /**
   * After SIGKILL, how long to wait for the process to go away before giving up on it. A process
   * stuck in the kernel (an NFS mount against a dead server) may not die at once; the call must
   * still return.
   */
  reapGraceMs?: number;
}

/** What one child did: exit code or the signal that ended it, its output, or why it never started. */
interface Outcome {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  spawnError?: Error;
}

// Process groups of the commands still running, killed if this process exits first (a command
// started in its own group would otherwise outlive us).
const running = new Set<number>();
let exitHookInstalled = false;
function track(pid: number): void {
  running.add(pid);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const p of running) {
      try {
        process.kill(-p, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  });
}

/** Runs one command to its end: node:child_process directly (execa cost ~0.9 ms more per exec here). */
function runChild(
  file: string,
  args: readonly string[],
  input: string | undefined,
): {
  pid: number | undefined;
  done: Promise<Outcome>;
} {
  const child = spawn(file, [...args], {
    detached: true,
    // Messages are parsed (e.g. "not mounted", "Stale file handle"): keep them in English.
    env: { ...process.env, LC_ALL: 'C', LANG: 'C' },
    stdio: [input !== undefined ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  const pid = child.pid;
  if (pid !== undefined) track(pid);
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout?.on('data', (b: Buffer) => out.push(b));
  child.stderr?.on('data', (b: Buffer) => err.push(b));
  if (input !== undefined && child.stdin) {
    // A command that exits without reading its input closes the pipe: not an error of ours.
    child.stdin.on('error', () => undefined);
    child.stdin.end(input);
  }
  const text = (parts: Buffer[]) => Buffer.concat(parts).toString('utf8');
  const done = new Promise<Outcome>((resolve) => {
    child.once('error', (e) => {
      if (pid !== undefined) running.delete(pid);
      resolve({ exitCode: null, signal: null, stdout: text(out), stderr: text(err), spawnError: e });
    });
    child.once('close', (exitCode: number | null, signal: NodeJS.Signals | null) => {
      if (pid !== undefined) running.delete(pid);
      resolve({ exitCode, signal, stdout: text(out), stderr: text(err) });
    });
  });
  return { pid, done };
}

export function createExec(options: CreateExecOptions = {}): Exec {
  const defaultTimeoutMs = options.defaultTimeoutMs ?? 120_000;
  const reapGraceMs = options.reapGraceMs ?? 2_000;

  return {
    async run(file, args, opts = {}) {
      const timeoutMs = opts.timeoutMs ?? defaultTimeoutMs;
      if (opts.signal?.aborted) {
        throw new CommandError({ command: file, args, reason: 'aborted' });
      }
      const child = runChild(file, args, opts.input);

      let stopped: 'timeout' | 'aborted' | undefined;
      const killGroup = () => {
        if (child.pid === undefined) return;
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
      };
      let reap: (() => void) | undefined;
      const gaveUp = new Promise<'gave-up'>((resolve) => {
        reap = () => setTimeout(() => resolve('gave-up'), reapGraceMs).unref();
      });
      const stop = (why: 'timeout' | 'aborted') => {
        if (stopped) return;
        stopped = why;
        killGroup();
        reap?.();
      };
      const timer = setTimeout(() => stop('timeout'), timeoutMs);
      const onAbort = () => stop('aborted');
      opts.signal?.addEventListener('abort', onAbort, { once: true });

      try {
        const outcome = await Promise.race([child.done, gaveUp]);
        if (stopped) {
          throw new CommandError({
            command: file,
            args,
            reason: stopped,
            detail: stopped === 'timeout' ? `within ${timeoutMs} ms` : undefined,
            stdout: outcome === 'gave-up' ? '' : outcome.stdout,
            stderr: outcome === 'gave-up' ? '' : outcome.stderr,
          });
        }
        if (outcome === 'gave-up') throw new Error('unreachable');
        const { stdout, stderr } = outcome;
        if (outcome.exitCode === 0) return { stdout, stderr, exitCode: 0 };
        if (outcome.spawnError) {
          throw new CommandError({
            command: file,
            args,
            reason: 'spawn',
            detail: outcome.spawnError.message,
            stdout,
            stderr,
          });
        }
        if (outcome.exitCode === null) {
          throw new CommandError({
            command: file,
            args,
            reason: 'exit',
            exitCode: -1,
            detail: outcome.signal ?? undefined,
            stdout,
            stderr: stderr || `killed by ${outcome.signal ?? 'a signal'}`,
          });
        }
        throw new CommandError({ command: file, args, reason: 'exit', exitCode: outcome.exitCode, stdout, stderr });
      } finally {
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
      }
    },
  };
}
