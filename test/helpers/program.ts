// The real program (src/main.ts under tsx) as a child process, for tests of what only the whole
// process does: flags, start-up, signals, sockets. Killed on the test's teardown if still running,
// and by test/harness/reaper.sh if the test process is killed first.
import type { ChildProcessByStdio } from 'node:child_process';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { Teardown } from './teardown.js';
import { spawnGuarded } from '../harness/reaper.js';

export interface RunningProgram {
  child: ChildProcessByStdio<null, Readable, Readable>;
  /** Its exit code (null when a signal ended it). */
  exited: Promise<number | null>;
  kill: (signal: NodeJS.Signals) => void;
  /** Everything it wrote so far, stdout and stderr together. */
  output: () => string;
  /** Resolves once it logged `"ready":true`; rejects if it exits first or is not ready in time. */
  ready: (timeoutMs?: number) => Promise<void>;
}

export function spawnProgram(t: Teardown, args: string[]): RunningProgram {
  // Its own process group, killed if this test process dies first (test/harness/reaper.ts); the
  // spawn options make stdout and stderr pipes.
  const child = spawnGuarded(process.execPath, ['--import=tsx', path.resolve('src/main.ts'), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  }) as ChildProcessByStdio<null, Readable, Readable>;
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let out = '';
  const waiters = new Set<() => void>();
  const wake = () => {
    for (const w of waiters) w();
  };
  const onData = (d: Buffer) => {
    out += d.toString();
    wake();
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  const exited = new Promise<number | null>((resolve) => {
    child.on('exit', (code) => {
      resolve(code);
      wake();
    });
  });
  const ready = (timeoutMs = 30_000) =>
    new Promise<void>((resolve, reject) => {
      const done = (err?: Error) => {
        clearTimeout(timer);
        waiters.delete(check);
        if (err) reject(err);
        else resolve();
      };
      const check = () => {
        if (out.includes('"ready":true')) done();
        else if (child.exitCode !== null || child.signalCode !== null)
          done(new Error(`exit ${child.exitCode ?? child.signalCode ?? ''} before ready: ${out}`));
      };
      const timer = setTimeout(() => {
        done(new Error(`not ready after ${timeoutMs} ms: ${out}`));
      }, timeoutMs);
      waiters.add(check);
      check();
    });
  return { child, exited, kill: (signal) => void child.kill(signal), output: () => out, ready };
}
