// A fake Exec that plays mount/umount against an in-memory mount table (served to the mounter as
// mountinfo text: createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo })), records every
// command, and lets a test intercept any of them (hang, fail, stale). Commands it does not
// model (stat) go to a real executor, so paths in a temp dir behave as they really would.
import { CommandError, createExec, type Exec, type ExecOptions, type ExecResult } from '../../../src/os/exec.js';
import type { MountEntry } from '../../../src/os/mounter.js';

export interface Call {
  cmd: string;
  args: string[];
  timeoutMs: number | undefined;
}

export type Interceptor = (cmd: string, args: string[], opts: ExecOptions) => Promise<ExecResult> | undefined;

export const ok = (stdout = ''): ExecResult => ({ stdout, stderr: '', exitCode: 0 });

export function fail(cmd: string, args: string[], exitCode: number, stderr: string): CommandError {
  return new CommandError({ command: cmd, args, reason: 'exit', exitCode, stderr });
}

export function timeout(cmd: string, args: string[], ms = 1): CommandError {
  return new CommandError({ command: cmd, args, reason: 'timeout', detail: `within ${ms} ms` });
}

/** The parts of `mount -t TYPE [-o OPTS] SOURCE TARGET`; undefined for any other form. */
export function parseMount(
  args: readonly string[],
): { fstype: string; options: string[]; source: string; target: string } | undefined {
  if (args[0] !== '-t') return undefined;
  const hasOpts = args[2] === '-o';
  const [fstype, source, target] = [args[1], ...args.slice(hasOpts ? 4 : 2)];
  if (fstype === undefined || source === undefined || target === undefined) return undefined;
  return { fstype, options: hasOpts ? (args[3] ?? '').split(',') : [], source, target };
}

export class FakeSystem implements Exec {
  readonly calls: Call[] = [];
  readonly table: MountEntry[] = [];
  readonly interceptors: Interceptor[] = [];
  private readonly real = createExec({ defaultTimeoutMs: 10_000 });
  private nextMinor = 100;

  /** Every command run. */
  get commands(): string[][] {
    return this.calls.map((c) => [c.cmd, ...c.args]);
  }

  /** The table as /proc/self/mountinfo prints it (a bound subtree's `[fsroot]` is not part of SOURCE there). */
  readonly mountinfo = (): Promise<string> => {
    const esc = (p: string) => p.replace(/[ \t\n\\]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`);
    const lines = this.table.map((m, i) => {
      const source =
        m.fsroot !== '/' && m.source.endsWith(`[${m.fsroot}]`) ? m.source.slice(0, -m.fsroot.length - 2) : m.source;
      return `${i + 100} 1 ${m.majMin} ${esc(m.fsroot)} ${esc(m.target)} ${m.options.join(',')} shared:1 - ${m.fstype} ${esc(source || 'none')} rw`;
    });
    return Promise.resolve(lines.join('\n') + '\n');
  };

  intercept(fn: Interceptor): void {
    this.interceptors.push(fn);
  }

  addMount(entry: Partial<MountEntry> & Pick<MountEntry, 'target' | 'source' | 'fstype'>): void {
    this.table.push({ options: ['rw'], fsroot: '/', majMin: `0:${this.nextMinor++}`, ...entry });
  }

  private top(target: string): number {
    return this.table.findLastIndex((e) => e.target === target);
  }

  async run(cmd: string, argsIn: readonly string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const args = [...argsIn];
    this.calls.push({ cmd, args, timeoutMs: opts.timeoutMs });
    for (const fn of this.interceptors) {
      const r = fn(cmd, args, opts);
      if (r) return r;
    }
    switch (cmd) {
      case 'mount':
        return this.mount(cmd, args);
      case 'umount': {
        const target = args.at(-1) ?? '';
        const i = this.top(target);
        if (i < 0) throw fail(cmd, args, 32, `umount: ${target}: not mounted.`);
        this.table.splice(i, 1);
        return ok();
      }
      default:
        return this.real.run(cmd, args, opts);
    }
  }

  private mount(cmd: string, args: string[]): ExecResult {
    if (args[0] === '--bind') {
      const [, source, target] = args as [string, string, string];
      // A device node bound onto a file: the subtree /<name> of devtmpfs, as the kernel lists it.
      const name = source.slice(source.lastIndexOf('/'));
      const src = this.table[this.top(source)] ?? {
        source: `devtmpfs[${name}]`,
        fstype: 'devtmpfs',
        options: ['rw'],
        fsroot: name,
        majMin: '0:6',
      };
      this.table.push({ ...src, target, options: [...src.options] });
      return ok();
    }
    const [first, opts = '', remountTarget = ''] = args;
    if (first === '-o' && opts.startsWith('remount')) {
      const entry = this.table[this.top(remountTarget)];
      if (!entry) throw fail(cmd, args, 32, `mount: ${remountTarget}: not mounted.`);
      const flags = opts.split(',').filter((f) => f !== 'remount' && f !== 'bind');
      entry.options = [...flags, ...entry.options.filter((o) => o !== 'rw' && o !== 'ro' && !flags.includes(o))];
      if (!entry.options.includes('ro')) entry.options.unshift('rw');
      return ok();
    }
    const m = parseMount(args);
    if (!m) throw fail(cmd, args, 1, `fake mount: unexpected arguments ${args.join(' ')}`);
    const { options } = m;
    this.addMount({ ...m, options: options.includes('ro') ? options : ['rw', ...options] });
    return ok();
  }
}
