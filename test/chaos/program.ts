// The real program under test, started the way test/sanity/main.ts starts it: the build when it
// is current, else the sources through tsx, so the suite always tests the checkout as it is. kill -9 and restart are what the
// kill scenario needs; a mount namespace of its own is what the bad-input table needs.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync } from 'node:child_process';
import { defined } from '../../src/defined.js';
import { start, type Proc } from '../harness/procs.js';
import type { ChaosEnv } from './env.js';
import { CsiCaller, type Recorder } from './rpc.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface ProgramOptions {
  name: string;
  runDir: string;
  args: string[];
  /** Run inside `unshare -m --propagation private`, after this shell snippet prepared mounts. */
  namespace?: { setup: string };
}

function newestMtime(dir: string): number {
  let newest = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    newest = Math.max(newest, e.isDirectory() ? newestMtime(p) : fs.statSync(p).mtimeMs);
  }
  return newest;
}

let entry: string[] | undefined;
/**
 * How to start the program: the build (dist/src/main.js, what `npm test` built a phase earlier)
 * when it is newer than every source file, since it starts twice as fast as tsx, which matters
 * on a busy 2-core machine with a dozen starts; else the sources through tsx.
 */
export function programEntry(): string[] {
  if (entry) return entry;
  const built = path.join(ROOT, 'dist/src/main.js');
  const fresh = fs.existsSync(built) && fs.statSync(built).mtimeMs >= newestMtime(path.join(ROOT, 'src'));
  entry = fresh ? [built] : ['--import=tsx', path.join(ROOT, 'src/main.ts')];
  return entry;
}

/** Flags this checkout's program knows (some arrive with other branches, e.g. --kubelet-dir). */
let help: string | undefined;
export function programKnows(flag: string): boolean {
  help ??= execFileSync(process.execPath, [...programEntry(), '--help'], { cwd: ROOT, encoding: 'utf8' });
  return help.includes(flag);
}

export class Program {
  proc?: Proc;
  starts = 0;

  constructor(private readonly o: ProgramOptions) {}

  async start(): Promise<void> {
    this.starts++;
    const node = [process.execPath, ...programEntry(), ...this.o.args];
    const logFile = path.join(this.o.runDir, `${this.o.name}.log`);
    fs.appendFileSync(logFile, `--- start ${this.starts} ${new Date().toISOString()}\n`);
    const [cmd, args] = this.o.namespace
      ? ([
          'unshare',
          ['-m', '--propagation', 'private', 'sh', '-ec', `${this.o.namespace.setup}\nexec "$@"`, 'sh', ...node],
        ] as const)
      : ([process.execPath, node.slice(1)] as const);
    this.proc = start(this.o.name, cmd, [...args], { cwd: ROOT, logFile });
    await this.proc.readyJson((j) => j.ready === true, 60_000);
  }

  get pid(): number {
    return defined(this.proc?.child.pid, `${this.o.name}'s pid (started?)`);
  }

  alive(): boolean {
    const c = this.proc?.child;
    return !!c && c.exitCode === null && c.signalCode === null;
  }

  async kill9(): Promise<void> {
    await this.proc?.stop('SIGKILL', 1000);
  }

  async stop(): Promise<void> {
    await this.proc?.stop('SIGTERM', 5000);
  }
}

/** The program as a Proxmox controller on `<name>.sock` in the run dir, and a caller recording into `rec`. */
export async function startProxmoxController(
  env: ChaosEnv,
  rec: Recorder,
  name: string,
): Promise<{ prog: Program; csi: CsiCaller }> {
  const sock = path.join(env.runDir, `${name}.sock`);
  const prog = new Program({
    name: `${name}-controller`,
    runDir: env.runDir,
    args: ['--mode', 'controller', '--proxmox-endpoint', `unix://${sock}`, '--proxmox-config', env.proxmoxConfig],
  });
  await prog.start();
  return { prog, csi: new CsiCaller(`unix://${sock}`, rec) };
}
