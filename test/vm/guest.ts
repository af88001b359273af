// The VM tier's guest: a QEMU (TCG) Linux that plays the Talos VM. The host's root is its
// read-only lower layer, so it runs the host's node, mkfs, mount.nfs and this repo's dist/.
// It serves a kernel NFS server, hot-plug over QMP, and commands over the guest agent; the
// host reaches guest ports only through forwarded loopback ports. Nothing outlives the
// harness: stop() is idempotent, exit/SIGINT/SIGTERM stop every live guest, and a watchdog
// (tether.sh) kills QEMU and removes the temp dir even if this process is SIGKILLed.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { guestAgentAlive, guestExec, type ExecOptions, type ExecResult } from './qga.js';
import { QmpClient } from '../../sim/backend/qmp.js';
import { prepareGuest, type GuestArtifacts } from './prepare.js';
import { freePort } from '../helpers/free-port.js';

export { type ExecOptions, type ExecResult } from './qga.js';

export const GUEST_NFS_PORT = 2049;
export const GUEST_MOUNTD_PORT = 20048;

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '../..');

export interface Forward {
  guestPort: number;
  /** Host loopback port; omitted or 0 picks a free one. */
  hostPort?: number;
}

export interface GuestOptions {
  /** Guest TCP ports reachable from the host at 127.0.0.1:hostPort (NFS ports are added). */
  forwards?: Forward[];
  /**
   * Guest-side addresses QEMU relays to a host loopback port (guestfwd, one relay per connection):
   * the one way out of the guest, e.g. to a kube-apiserver on the host.
   */
  guestForwards?: { guestAddress: string; guestPort: number; hostPort: number }[];
  /** Where QEMU serves the QMP socket meant for the simulator; default `<dir>/qmp.sock`. */
  qmpSocket?: string;
  /** Bash script run as root in the guest (own process group, cwd /) once NFS and the agent are up. */
  run?: string;
  /** Guest ports that must be listening before startGuest resolves; default every forward's. */
  waitPorts?: number[];
  /** Exported to the run script. */
  env?: Record<string, string>;
  /** Directory that receives console.log, run.log, qga.log and qemu.log when the guest stops. */
  logDir?: string;
  /** Progress lines; default stderr. */
  log?: (line: string) => void;
  /** Boot, setup and waitPorts together. Default 300 s (TCG on 2 cores is slow). */
  readyTimeoutMs?: number;
  memoryMb?: number;
  cpus?: number;
  /** Stop every live guest and exit on SIGINT/SIGTERM/SIGHUP. Default true; a caller with
   * its own handling passes false (and should stop the guest itself). */
  handleSignals?: boolean;
  /** Aborts the boot (startGuest rejects after cleaning up). */
  signal?: AbortSignal;
}

export interface Guest {
  /** Temp dir of this guest (sockets, logs while it runs); removed by stop(). */
  readonly dir: string;
  readonly qmpSocket: string;
  readonly qgaSocket: string;
  readonly nfsPort: number;
  readonly nfsMountPort: number;
  /** guest port → host port, forwards and NFS ports alike. */
  readonly ports: ReadonlyMap<number, number>;
  hostPort(guestPort: number): number;
  readonly consoleLog: string;
  readonly runLog: string;
  /** argv[0] is looked up in the guest's PATH; runs as root in the guest's root. */
  exec(argv: string[], opts?: ExecOptions): Promise<ExecResult>;
  /** `bash -c script`; rejects with the output when the exit code is not 0. */
  sh(script: string, opts?: ExecOptions): Promise<string>;
  /** Exit code of the run script if it has ended (it should not, for a server). */
  runExitCode(): number | undefined;
  /** Settles when QEMU has exited, with its exit code. */
  readonly exited: Promise<number | null>;
  stop(): Promise<void>;
}

const live = new Set<GuestImpl>();

export async function startGuest(opts: GuestOptions = {}): Promise<Guest> {
  const log = opts.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const artifacts = await prepareGuest(log);
  // A host port picked free can be taken before QEMU binds it; QEMU then exits at once.
  for (let attempt = 1; ; attempt++) {
    const g = new GuestImpl(opts, artifacts, log);
    try {
      await g.boot();
      return g;
    } catch (e) {
      await g.stop();
      if (!(e instanceof PortTaken) || attempt >= 3) throw e;
      log(`vm: ${e.message}; retrying with other ports`);
    }
  }
}

class PortTaken extends Error {}

class GuestImpl implements Guest {
  readonly dir: string;
  readonly qmpSocket: string;
  readonly qgaSocket: string;
  readonly ctlSocket: string;
  readonly consoleLog: string;
  readonly runLog: string;
  readonly ports = new Map<number, number>();
  exited!: Promise<number | null>;
  private child: ChildProcess | undefined;
  private hasExited = false;
  private stopping: Promise<void> | undefined;
  private readonly t0 = Date.now();

  constructor(
    private readonly opts: GuestOptions,
    private readonly artifacts: GuestArtifacts,
    private readonly log: (l: string) => void,
  ) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pve-vm-'));
    this.qmpSocket = opts.qmpSocket ?? path.join(this.dir, 'qmp.sock');
    this.qgaSocket = path.join(this.dir, 'qga.sock');
    this.ctlSocket = path.join(this.dir, 'ctl.sock');
    this.consoleLog = path.join(this.dir, 'console.log');
    this.runLog = path.join(this.dir, 'run.log');
    live.add(this);
    installExitHook();
    if (opts.handleSignals !== false) installSignalHooks();
  }

  get nfsPort(): number {
    return this.hostPort(GUEST_NFS_PORT);
  }

  get nfsMountPort(): number {
    return this.hostPort(GUEST_MOUNTD_PORT);
  }

  hostPort(guestPort: number): number {
    const p = this.ports.get(guestPort);
    if (p === undefined) throw new Error(`guest port ${guestPort} is not forwarded`);
    return p;
  }

  private elapsed(): string {
    return `${((Date.now() - this.t0) / 1000).toFixed(1)}s`;
  }

  async boot(): Promise<void> {
    const forwards = [...(this.opts.forwards ?? []), { guestPort: GUEST_NFS_PORT }, { guestPort: GUEST_MOUNTD_PORT }];
    for (const f of forwards) {
      if (this.ports.has(f.guestPort)) continue;
      this.ports.set(f.guestPort, f.hostPort || (await freePort()));
    }
    const waitPorts = this.opts.waitPorts ?? (this.opts.forwards ?? []).map((f) => f.guestPort);
    this.writeGuestFiles(waitPorts);
    if (this.opts.qmpSocket) fs.rmSync(this.opts.qmpSocket, { force: true });

    const qemuLog = fs.openSync(path.join(this.dir, 'qemu.log'), 'w');
    const child = spawn(
      'bash',
      [path.join(here, 'tether.sh'), '0', this.dir, 'qemu-system-x86_64', ...this.qemuArgs()],
      {
        stdio: ['pipe', qemuLog, qemuLog],
        // Own process group: a terminal's Ctrl-C reaches us, and we stop the guest in order.
        detached: true,
      },
    );
    fs.closeSync(qemuLog);
    this.child = child;
    child.stdin?.on('error', () => {});
    this.exited = new Promise((resolve) => {
      child.on('exit', (code) => {
        this.hasExited = true;
        resolve(code);
      });
    });
    this.log(`vm: booting (${this.opts.cpus ?? 2} vCPU TCG), dir ${this.dir}`);

    const timeoutMs = this.opts.readyTimeoutMs ?? 300_000;
    const deadline = Date.now() + timeoutMs;
    let baseSeen = false;
    for (;;) {
      const failed = this.readShared('failed');
      if (failed !== undefined) throw new Error(`guest setup failed: ${failed.trim()}\n${this.tails()}`);
      if (!baseSeen && fs.existsSync(path.join(this.dir, 'base-ready'))) {
        baseSeen = true;
        this.log(`vm: guest services (NFS server, agent) up at ${this.elapsed()}`);
      }
      if (fs.existsSync(path.join(this.dir, 'ready'))) break;
      if (this.opts.signal?.aborted) throw new Error('guest boot aborted');
      if (this.hasExited) {
        const qlog = this.readShared('qemu.log') ?? '';
        if (/host forwarding rule|Address already in use/i.test(qlog)) throw new PortTaken(qlog.trim());
        throw new Error(`QEMU exited during boot\n${this.tails()}`);
      }
      if (Date.now() > deadline) {
        throw new Error(
          `guest not ready within ${timeoutMs / 1000}s (waiting for ports ${waitPorts.join(' ') || '-'})\n${this.tails()}`,
        );
      }
      await sleep(100);
    }
    if (!(await guestAgentAlive(this.qgaSocket, 30_000))) {
      throw new Error(`guest agent does not answer on ${this.qgaSocket}\n${this.tails()}`);
    }
    this.log(`vm: ready at ${this.elapsed()}`);
  }

  private writeGuestFiles(waitPorts: number[]): void {
    const lines = [
      `VM_MOUNTD_PORT=${GUEST_MOUNTD_PORT}`,
      `VM_WAIT_PORTS=${shq(waitPorts.join(' '))}`,
      `VM_READY_TIMEOUT=${Math.ceil((this.opts.readyTimeoutMs ?? 300_000) / 1000)}`,
      ...Object.entries(this.opts.env ?? {}).map(([k, v]) => {
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new Error(`bad environment variable name ${JSON.stringify(k)}`);
        return `export ${k}=${shq(v)}`;
      }),
    ];
    fs.writeFileSync(path.join(this.dir, 'config.env'), lines.join('\n') + '\n');
    fs.writeFileSync(path.join(this.dir, 'run.sh'), this.opts.run ?? '');
  }

  private qemuArgs(): string[] {
    const a = this.artifacts;
    for (const p of [a.stage2, a.modules]) {
      if (/\s/.test(p)) throw new Error(`path ${p} contains whitespace; the kernel command line can't carry it`);
    }
    const fwd = [
      ...[...this.ports].map(([g, h]) => `hostfwd=tcp:127.0.0.1:${h}-127.0.0.1:${g}`),
      // busybox nc per connection: a chardev relay would carry only one connection at a time.
      ...(this.opts.guestForwards ?? []).map(
        (f) => `guestfwd=tcp:${f.guestAddress}:${f.guestPort}-cmd:busybox nc 127.0.0.1 ${f.hostPort}`,
      ),
    ].join(',');
    return [
      '-accel',
      'tcg',
      '-smp',
      String(this.opts.cpus ?? 2),
      '-m',
      String(this.opts.memoryMb ?? 2048),
      '-nodefaults',
      '-no-user-config',
      '-display',
      'none',
      '-no-reboot',
      '-pidfile',
      path.join(this.dir, 'qemu.pid'),
      '-kernel',
      a.kernel,
      '-initrd',
      a.initrd,
      // mitigations=off: page-table isolation makes every syscall flush TCG's whole soft TLB.
      '-append',
      `console=ttyS0 quiet panic=-1 mitigations=off vm.stage2=${a.stage2} vm.modules=${a.modules} vm.node=${process.execPath}`,
      '-chardev',
      `file,id=con0,path=${this.consoleLog}`,
      '-serial',
      'chardev:con0',
      '-virtfs',
      'local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap',
      '-virtfs',
      `local,path=${this.dir},mount_tag=hostrun,security_model=none`,
      // Same controller id as Proxmox's, so the simulator's device_add targets scsihw0.0.
      '-device',
      'virtio-scsi-pci,id=scsihw0',
      '-qmp',
      `unix:${this.qmpSocket},server=on,wait=off`,
      '-qmp',
      `unix:${this.ctlSocket},server=on,wait=off`,
      '-chardev',
      `socket,id=qga0,path=${this.qgaSocket},server=on,wait=off`,
      '-device',
      'virtio-serial-pci',
      '-device',
      'virtserialport,chardev=qga0,name=org.qemu.guest_agent.0',
      '-netdev',
      `user,id=n0,restrict=on${fwd ? ',' + fwd : ''}`,
      '-device',
      'virtio-net-pci,netdev=n0,romfile=',
    ];
  }

  private readShared(name: string): string | undefined {
    try {
      return fs.readFileSync(path.join(this.dir, name), 'utf8');
    } catch {
      return undefined;
    }
  }

  /** The last lines of the logs, for error messages a person can act on. */
  tails(): string {
    const out: string[] = [];
    for (const name of ['console.log', 'run.log', 'qemu.log']) {
      const text = this.readShared(name);
      if (!text?.trim()) continue;
      const lines = text
        // eslint-disable-next-line no-control-regex -- ESC starts the terminal escape sequences removed here
        .replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '')
        .trimEnd()
        .split('\n')
        .slice(-25);
      out.push(`--- ${name} (last ${lines.length} lines) ---`, ...lines);
    }
    return out.join('\n');
  }

  exec(argv: string[], opts?: ExecOptions): Promise<ExecResult> {
    return guestExec(this.qgaSocket, argv, opts);
  }

  async sh(script: string, opts?: ExecOptions): Promise<string> {
    const r = await this.exec(['/bin/bash', '-c', script], opts);
    if (r.code !== 0) {
      throw new Error(
        `guest command failed (exit ${r.code}, signal ${r.signal}): ${script}\n${r.stdout.toString()}${r.stderr.toString()}`,
      );
    }
    return r.stdout.toString();
  }

  runExitCode(): number | undefined {
    const t = this.readShared('run-exited');
    return t === undefined ? undefined : Number(t.trim());
  }

  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  private async doStop(): Promise<void> {
    const t = Date.now();
    if (this.child && !this.hasExited) {
      // Clean: PID 1 of the guest stops the run script, unmounts and powers off. Before the
      // guest's services are up there is no agent to ask.
      const agentUp = fs.existsSync(path.join(this.dir, 'base-ready'));
      let gone = false;
      if (agentUp) {
        // The agent may die with the guest before it reports; the wait below tells.
        await guestExec(this.qgaSocket, ['kill', '-TERM', '1'], { timeoutMs: 5_000 }).catch(() => {});
        gone = await this.waitExit(30_000);
      }
      if (!gone) {
        this.log('vm: guest did not power off; quitting QEMU');
        try {
          const q = await QmpClient.connect(this.ctlSocket, 3_000);
          await q.execute('quit').catch(() => {});
          q.close();
        } catch {
          // QMP unreachable: the kill below covers it.
        }
        gone = await this.waitExit(5_000);
      }
      if (!gone) {
        this.child.stdin?.write('kill\n');
        this.killQemuNow();
        await this.waitExit(10_000);
      }
    }
    this.child?.stdin?.end();
    this.saveLogs();
    fs.rmSync(this.dir, { recursive: true, force: true });
    if (this.opts.qmpSocket) fs.rmSync(this.opts.qmpSocket, { force: true });
    live.delete(this);
    if (this.child) this.log(`vm: stopped in ${((Date.now() - t) / 1000).toFixed(1)}s`);
  }

  /** Waits up to `ms` for QEMU to exit; whether it has. */
  private async waitExit(ms: number): Promise<boolean> {
    if (this.hasExited) return true;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.exited, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
    clearTimeout(timer);
    return this.hasExited;
  }

  /** Synchronous, for the process 'exit' hook. */
  killQemuNow(): void {
    const pid = Number(this.readShared('qemu.pid')?.trim());
    if (pid > 0) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  }

  private saveLogs(): void {
    if (!this.opts.logDir) return;
    fs.mkdirSync(this.opts.logDir, { recursive: true });
    // console.log, run.log, qga.log, qemu.log, and whatever the run script logged beside them.
    for (const name of fs.existsSync(this.dir) ? fs.readdirSync(this.dir) : []) {
      if (name.endsWith('.log')) fs.copyFileSync(path.join(this.dir, name), path.join(this.opts.logDir, name));
    }
  }

  /** Synchronous last resort, when the process is exiting without having stopped us. */
  abandon(): void {
    this.killQemuNow();
    this.saveLogs();
    fs.rmSync(this.dir, { recursive: true, force: true });
    if (this.opts.qmpSocket) fs.rmSync(this.opts.qmpSocket, { force: true });
  }
}

let exitHook = false;
function installExitHook(): void {
  if (exitHook) return;
  exitHook = true;
  process.on('exit', () => {
    for (const g of live) g.abandon();
  });
}

let signalHooks = false;
function installSignalHooks(): void {
  if (signalHooks) return;
  signalHooks = true;
  for (const [sig, code] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
    ['SIGHUP', 129],
  ] as const) {
    process.on(sig, () => {
      if (live.size === 0) process.exit(code);
      process.stderr.write(`vm: ${sig}: stopping ${live.size} guest(s)\n`);
      // A second signal while stopping exits at once; the 'exit' hook still kills QEMU.
      process.once(sig, () => process.exit(code));
      void Promise.allSettled([...live].map((g) => g.stop())).then(() => process.exit(code));
    });
  }
}

/** Single-quotes for bash. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
