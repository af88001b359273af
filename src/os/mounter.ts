// Mounter port and its Linux adapter (util-linux mount/umount/stat through Exec, the mount table
// from /proc/self/mountinfo). Everything that could block on a dead filesystem runs as a child
// process under a timeout, so a hung NFS server costs a killed process, never a stuck libuv thread.
import { readFileSync } from 'node:fs';
import { type Exec, isCommandError } from './exec.js';
import { parseMountinfo, type MountEntry } from './mountinfo.js';
import { canonicalPath } from './paths.js';

export type { MountEntry };

export type BrokenErrno = 'ESTALE' | 'ENOTCONN' | 'EIO' | 'ETIMEDOUT' | 'EOTHER';

export type PathState =
  | { state: 'ok'; kind: 'directory' | 'file' | 'block' | 'symlink' | 'other' }
  | { state: 'missing' }
  | { state: 'broken'; errno: BrokenErrno; message: string };

export interface MountCallOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface UnmountOptions {
  timeoutMs?: number;
  /**
   * After a failed or timed-out plain unmount, retry with `umount -f` and then `umount -l`.
   * Right for network filesystems; wrong for a busy local disk (detaching it under a writer).
   */
  force?: boolean;
  /**
   * Whose mount this is allowed to remove. Checked for every layer before it is unmounted: the
   * first layer it refuses stops the unmount and is returned, untouched (with the layers below it).
   */
  owns?: (entry: MountEntry) => boolean | Promise<boolean>;
}

export interface Mounter {
  list(): Promise<MountEntry[]>;
  /** The topmost mount whose mount point is exactly `target` (parent symlinks resolved). */
  find(target: string): Promise<MountEntry | undefined>;
  /** find() for several targets from one read of the mount table (one snapshot). */
  findEach(targets: readonly string[]): Promise<(MountEntry | undefined)[]>;
  mount(
    source: string,
    target: string,
    fstype: string,
    options: readonly string[],
    opts?: MountCallOptions,
  ): Promise<void>;
  /** Bind `source` onto `target`; `readonly` and per-mount flags are applied by a bind remount. */
  bindMount(source: string, target: string, opts: { readonly: boolean; flags?: readonly string[] }): Promise<void>;
  /**
   * Unmount every layer mounted at target; not mounted is success. With `owns`, only the layers
   * it accepts: the first one it does not is returned, still mounted (undefined: nothing is left).
   */
  unmount(target: string, opts?: UnmountOptions): Promise<MountEntry | undefined>;
  /** stat(2) the path in a child process under a timeout and classify the outcome. */
  probe(path: string, timeoutMs?: number): Promise<PathState>;
}

export interface LinuxMounterOptions {
  exec: Exec;
  /** Command names, overridable for tests. */
  bin?: Partial<Record<'mount' | 'umount' | 'stat', string>>;
  /** The mount table as mountinfo text (proc(5)); default: reads /proc/self/mountinfo. Tests serve their own. */
  mountinfo?: () => Promise<string>;
  /** Default bound for mount/umount. */
  timeoutMs?: number;
  probeTimeoutMs?: number;
}

/** Per-mount VFS flags that a bind remount can change; filesystem options cannot be. */
export const BIND_REMOUNT_FLAGS = new Set([
  'ro',
  'rw',
  'nosuid',
  'suid',
  'nodev',
  'dev',
  'noexec',
  'exec',
  'noatime',
  'atime',
  'nodiratime',
  'diratime',
  'relatime',
  'norelatime',
  'strictatime',
]);

const MAX_LAYERS = 8;

export function classifyStatError(message: string): PathState {
  if (/No such file or directory|Not a directory/i.test(message)) return { state: 'missing' };
  if (/Stale file handle/i.test(message)) return { state: 'broken', errno: 'ESTALE', message };
  if (/Transport endpoint is not connected/i.test(message)) return { state: 'broken', errno: 'ENOTCONN', message };
  if (/Input\/output error/i.test(message)) return { state: 'broken', errno: 'EIO', message };
  return { state: 'broken', errno: 'EOTHER', message };
}

function kindOf(statType: string): 'directory' | 'file' | 'block' | 'symlink' | 'other' {
  const t = statType.trim();
  if (t === 'symbolic link') return 'symlink';
  if (t === 'directory') return 'directory';
  if (t === 'regular file' || t === 'regular empty file') return 'file';
  if (t === 'block special file') return 'block';
  return 'other';
}

const notMounted = (e: unknown) => isCommandError(e, 'exit') && /not mounted|no mount point specified/i.test(e.stderr);

export function createLinuxMounter(o: LinuxMounterOptions): Mounter {
  const bin = { mount: 'mount', umount: 'umount', stat: 'stat', ...o.bin };
  // Read synchronously: procfs prints the table from the kernel's mount structures (no
  // filesystem is asked, so nothing can hang), and fs.promises.readFile would be five thread-pool
  // round trips for it (open, fstat, read, read, close); a node call reads the table 2–4 times.
  const mountinfo = o.mountinfo ?? (() => Promise.resolve().then(() => readFileSync('/proc/self/mountinfo', 'utf8')));
  const timeoutMs = o.timeoutMs ?? 60_000;
  const probeTimeoutMs = o.probeTimeoutMs ?? 5_000;
  const exec = o.exec;

  const list = async (): Promise<MountEntry[]> => parseMountinfo(await mountinfo());

  const findEach = async (targets: readonly string[]): Promise<(MountEntry | undefined)[]> => {
    const [all, ...wanted] = await Promise.all([list(), ...targets.map((p) => canonicalPath(p))]);
    // mountinfo lists mounts in mount order, so the last one at a path is the visible one.
    return wanted.map((want) => all.findLast((e) => e.target === want));
  };
  const find = async (target: string): Promise<MountEntry | undefined> => (await findEach([target]))[0];
  // For a path already made canonical: no second realpath (a thread-pool round trip) per look.
  const topAt = async (canonical: string): Promise<MountEntry | undefined> =>
    (await list()).findLast((e) => e.target === canonical);

  const umountOnce = async (args: string[], t: number) => {
    try {
      await exec.run(bin.umount, args, { timeoutMs: t });
      return true;
    } catch (e) {
      if (notMounted(e)) return true;
      throw e;
    }
  };

  return {
    list,
    find,
    findEach,

    async mount(source, target, fstype, options, opts = {}) {
      const args = ['-t', fstype];
      if (options.length) args.push('-o', options.join(','));
      args.push(source, target);
      await exec.run(bin.mount, args, { timeoutMs: opts.timeoutMs ?? timeoutMs, signal: opts.signal });
    },

    async bindMount(source, target, opts) {
      await exec.run(bin.mount, ['--bind', source, target], { timeoutMs });
      const flags = (opts.flags ?? []).filter((f) => BIND_REMOUNT_FLAGS.has(f) && f !== 'ro' && f !== 'rw');
      if (!opts.readonly && flags.length === 0) return;
      const remount = ['remount', 'bind', ...(opts.readonly ? ['ro'] : []), ...flags].join(',');
      try {
        await exec.run(bin.mount, ['-o', remount, target], { timeoutMs });
      } catch (e) {
        // Never leave a writable bind behind when read-only was asked for.
        await exec.run(bin.umount, [target], { timeoutMs }).catch(() => undefined);
        throw e;
      }
    },

    async unmount(target, opts = {}) {
      const t = opts.timeoutMs ?? timeoutMs;
      const path = await canonicalPath(target);
      for (let layer = 0; layer < MAX_LAYERS; layer++) {
        const top = await topAt(path);
        if (!top) return undefined;
        if (opts.owns && !(await opts.owns(top))) return top;
        // --no-canonicalize: umount would otherwise stat the mount point, which can hang on a dead server.
        try {
          await umountOnce(['--no-canonicalize', path], t);
          continue;
        } catch (e) {
          if (!opts.force) throw e;
        }
        try {
          await umountOnce(['--no-canonicalize', '-f', path], t);
          continue;
        } catch {
          // Fall through to a lazy unmount: detach now, let the kernel clean up when it can.
        }
        await umountOnce(['--no-canonicalize', '-l', path], t);
      }
      if (await topAt(path)) throw new Error(`${path} is still mounted after unmounting ${MAX_LAYERS} layers`);
      return undefined;
    },

    async probe(path, t = probeTimeoutMs) {
      try {
        const { stdout } = await exec.run(bin.stat, ['-c', '%F', '--', path], { timeoutMs: t });
        return { state: 'ok', kind: kindOf(stdout) };
      } catch (e) {
        if (isCommandError(e, 'timeout')) {
          return { state: 'broken', errno: 'ETIMEDOUT', message: `stat ${path} did not answer within ${t} ms` };
        }
        if (isCommandError(e, 'exit')) return classifyStatError(e.stderr || e.message);
        throw e;
      }
    },
  };
}
