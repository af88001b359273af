// Servers a harness starts outside its own process (ganesha, the program under test, a Kubernetes
// component) end with it, however it ends. Its own clean-up (finally, t.teardown, signal
// handlers) covers a normal end and Ctrl-C; for kill -9 and a crash there is scripts/lib/
// reaper.sh: a watcher beside the harness that waits for the pipe from it to close and then
// undoes what the harness's registry file still lists, and a sweep, run when a harness first
// registers, that undoes the registries of harnesses that are gone (their watcher too).
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'reaper.sh');

/** What to undo: a process group (SIGTERM, then SIGKILL), or an idempotent command. */
export type Undo = { group: number } | { run: string[] };

/** Where registries live (PVE_NFS_CSI_REAPER_DIR: another place, for a test of the reaper itself). */
export function reaperDir(): string {
  return process.env['PVE_NFS_CSI_REAPER_DIR'] ?? path.join(os.tmpdir(), 'pve-nfs-csi-reaper');
}

/** Field 22 of /proc/PID/stat: when the process started (clock ticks since boot). */
export function startTime(pid: number | 'self'): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(') ') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

interface Registry {
  file: string;
  lines: Map<number, string>;
  watcher: ChildProcess;
}

let registry: Registry | undefined;
let nextId = 0;

function open(): Registry {
  if (registry) return registry;
  const dir = reaperDir();
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  // The sweep runs the commands of every registry it finds: only from a directory no one else can write.
  const st = fs.statSync(dir);
  if (st.uid !== process.getuid?.() || (st.mode & 0o022) !== 0)
    throw new Error(`reaper: ${dir} must belong to this user and be writable by no one else`);
  spawnSync('bash', [SCRIPT, 'sweep', dir], { stdio: 'ignore' });
  const file = path.join(dir, `${process.pid}-${startTime('self') ?? '0'}.reg`);
  fs.writeFileSync(file, '');
  // Its own session: a signal to the harness's process group does not reach it.
  const watcher = spawn('bash', [SCRIPT, 'watch', file], { detached: true, stdio: ['pipe', 'ignore', 'ignore'] });
  watcher.unref();
  // The pipe must not keep the harness alive; it closes when the harness ends.
  (watcher.stdin as { unref?: () => void } | null)?.unref?.();
  registry = { file, lines: new Map(), watcher };
  return registry;
}

function write(r: Registry): void {
  fs.writeFileSync(r.file, [...r.lines.values()].map((l) => `${l}\n`).join(''));
}

/** Registers something to undo if this process ends without doing it; returns the release. */
export function undoOnExit(what: Undo): () => void {
  let line: string;
  if ('group' in what) {
    const start = startTime(what.group);
    if (start === undefined) return () => undefined; // already gone
    line = `group ${what.group} ${start}`;
  } else {
    if (what.run.some((a) => a === '' || /\s/.test(a)))
      throw new Error(`reaper: arguments must be words: ${what.run.join(' ')}`);
    line = `run ${what.run.join(' ')}`;
  }
  const r = open();
  const id = nextId++;
  r.lines.set(id, line);
  write(r);
  return () => {
    if (r.lines.delete(id)) write(r);
  };
}

/**
 * spawn() in a process group of its own (so its whole tree can be signalled), registered to be
 * killed if this process ends first; released when it exits.
 */
export function spawnGuarded(cmd: string, args: readonly string[], opts: SpawnOptions = {}): ChildProcess {
  const child = spawn(cmd, args, { ...opts, detached: true });
  if (child.pid !== undefined) {
    const release = undoOnExit({ group: child.pid });
    child.once('exit', () => release());
  }
  return child;
}

/** The watcher's PID (tests of the reaper kill it to leave the work to the next sweep). */
export function watcherPid(): number | undefined {
  return registry?.watcher.pid;
}
