import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createExec, isCommandError } from '../../../src/os/exec.js';
import { rejection } from '../../helpers/rejection.js';

const exec = createExec({ reapGraceMs: 500 });

/** Dead, or a zombie waiting for a reaper that is not us: either way it no longer runs. */
function isGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return true;
  }
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

t.test('returns stdout and stderr of a successful command', async (t) => {
  const r = await exec.run('sh', ['-c', 'echo out; echo err >&2']);
  t.equal(r.stdout, 'out\n');
  t.equal(r.stderr, 'err\n');
  t.equal(r.exitCode, 0);
});

t.test('a failing command rejects with its exit code and stderr', async (t) => {
  const err = await rejection(exec.run('sh', ['-c', 'echo "it broke" >&2; exit 3']));
  t.ok(isCommandError(err, 'exit'));
  t.equal(isCommandError(err) && err.exitCode, 3);
  t.equal(err.stderr, 'it broke');
  t.match(err.message, /sh -c .* failed with exit code 3: it broke/);
});

t.test('runs in the C locale so messages can be matched', async (t) => {
  const r = await exec.run('sh', ['-c', 'echo $LC_ALL']);
  t.equal(r.stdout.trim(), 'C');
});

t.test('stdin is empty unless input is given, so nothing can wait on a prompt', async (t) => {
  const r = await exec.run('cat', [], { timeoutMs: 2000 });
  t.equal(r.stdout, '');
  const withInput = await exec.run('cat', [], { input: 'hello' });
  t.equal(withInput.stdout, 'hello');
});

t.test('a timeout kills the command and its children', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'exec-test-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const pidFile = path.join(dir, 'child.pid');
  const started = Date.now();
  const err = await rejection(exec.run('sh', ['-c', `sleep 30 & echo $! > ${pidFile}; wait`], { timeoutMs: 300 }));
  const elapsed = Date.now() - started;
  t.ok(isCommandError(err, 'timeout'), 'rejects as a timeout');
  t.match(err.message, /did not finish within 300 ms and was killed/);
  t.ok(elapsed < 2500, `returned after ${elapsed} ms`);
  const childPid = Number(fs.readFileSync(pidFile, 'utf8'));
  t.ok(childPid > 0);
  // SIGKILL is delivered at once, but give the kernel a moment to tear the process down.
  for (let i = 0; i < 20 && !isGone(childPid); i++) await new Promise((r) => setTimeout(r, 50));
  t.ok(isGone(childPid), `grandchild ${childPid} was killed with the group`);
});

t.test('an aborted signal kills the command', async (t) => {
  const ac = new AbortController();
  setTimeout(() => ac.abort(), 100);
  const started = Date.now();
  const err = await rejection(exec.run('sleep', ['30'], { signal: ac.signal, timeoutMs: 10_000 }));
  t.ok(isCommandError(err, 'aborted'));
  t.ok(Date.now() - started < 2500);
  const pre = new AbortController();
  pre.abort();
  t.ok(
    isCommandError(await rejection(exec.run('true', [], { signal: pre.signal })), 'aborted'),
    'already aborted: not started',
  );
});

t.test('a command killed by a signal fails naming it; input a command never reads is no error', async (t) => {
  const err = await rejection(exec.run('sh', ['-c', 'kill -9 $$']));
  t.ok(isCommandError(err, 'exit'));
  t.equal(isCommandError(err) && err.exitCode, -1);
  t.match(err.message, /killed by SIGKILL/);
  const r = await exec.run('true', [], { input: 'x'.repeat(1 << 20) });
  t.equal(r.exitCode, 0, 'the closed pipe is not an error of ours');
});

t.test('a missing program is a spawn failure, not a crash', async (t) => {
  const err = await rejection(exec.run('/nonexistent/program-xyz', ['a']));
  t.ok(isCommandError(err, 'spawn'), `got ${err}`);
  t.match(err.message, /program-xyz a could not be started/);
});
