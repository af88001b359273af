// Exec port: run a command with a hard upper bound on its lifetime.
// The adapter starts every command in its own process group so a timeout or a cancelled call can
// kill the whole tree (mount → mount.nfs, sh → sleep), not just the direct child.

// execa is imported on the first command, not at start: a plugin answers its first Probe without
// it (its import cost 20–60 ms of start-up, measured with --cpu-prof under the image's flags).
let execaModule: Promise<typeof import('execa')> | undefined;
const loadExeca = () => (execaModule ??= import('execa'));

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

export interface ExecaExecOptions {
  defaultTimeoutMs?: number;
  /**
   * After SIGKILL, how long to wait for the process to go away before giving up on it. A process
   * stuck in the kernel (an NFS mount against a dead server) may not die at once; the call must
   * still return.
   */
  reapGraceMs?: number;
}

export function createExec(options: ExecaExecOptions = {}): Exec {
  const defaultTimeoutMs = options.defaultTimeoutMs ?? 120_000;
  const reapGraceMs = options.reapGraceMs ?? 2_000;

  return {
    async run(file, args, opts = {}) {
      const timeoutMs = opts.timeoutMs ?? defaultTimeoutMs;
      const { execa } = await loadExeca();
      // Checked after the import: an abort during it would not fire the listener added below.
      if (opts.signal?.aborted) {
        throw new CommandError({ command: file, args, reason: 'aborted' });
      }
      const child = execa(file, [...args], {
        reject: false,
        detached: true,
        cleanup: true,
        stripFinalNewline: false,
        // Messages are parsed (e.g. "not mounted", "Stale file handle"): keep them in English.
        env: { LC_ALL: 'C', LANG: 'C' },
        ...(opts.input !== undefined ? { input: opts.input } : { stdin: 'ignore' as const }),
      });

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
        const outcome = await Promise.race([child, gaveUp]);
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
        // Piped and utf8 (execa's defaults here): strings, '' for a command that never started.
        const { stdout, stderr } = outcome;
        if (outcome.exitCode === 0) return { stdout, stderr, exitCode: 0 };
        if (outcome.exitCode === undefined) {
          const spawnError = (outcome as { cause?: unknown }).cause;
          throw new CommandError({
            command: file,
            args,
            reason: outcome.signal ? 'exit' : 'spawn',
            exitCode: outcome.signal ? -1 : undefined,
            detail: spawnError instanceof Error ? spawnError.message : outcome.signal,
            stdout,
            stderr: stderr || (outcome.signal ? `killed by ${outcome.signal}` : ''),
          });
        }
        throw new CommandError({ command: file, args, reason: 'exit', exitCode: outcome.exitCode, stdout, stderr });
      } finally {
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
        // A process we gave up on must not surface later as an unhandled rejection.
        child.catch(() => undefined);
      }
    },
  };
}
