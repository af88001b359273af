// `test/vm/vm.sh run -- COMMAND...`: boots the guest with the node plugin in it, runs COMMAND
// on the host with the guest's coordinates in VM_* variables, stops the guest, and exits with
// COMMAND's exit code. See test/vm/README.md for the variables.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoRoot, shq, startGuest, type Guest } from './guest.js';
import { GUEST_KUBELET_DIR } from './guest-paths.js';

const GUEST_PROXMOX_PORT = 10000;
const GUEST_NFS_CSI_PORT = 10001;
const GUEST_METRICS_PORT = 9808;
const NODE_ID = 'talos-worker-1';

function log(line: string): void {
  process.stderr.write(`${line}\n`);
}

function nodeCommand(): string {
  const custom = process.env.VM_NODE_CMD;
  if (custom) return custom;
  const main = path.join(repoRoot, 'dist/src/main.js');
  if (!fs.existsSync(main)) {
    throw new Error(`${main} does not exist: run \`npm run build\` first, or set VM_NODE_CMD`);
  }
  return [
    // This very node binary (ensure.sh may have put a cached one first on PATH): the guest sees
    // the host's / read-only, so the same path runs the same version there.
    'exec',
    shq(process.execPath),
    shq(main),
    '--mode',
    'node',
    '--proxmox-endpoint',
    `tcp://127.0.0.1:${GUEST_PROXMOX_PORT}`,
    '--nfs-endpoint',
    `tcp://127.0.0.1:${GUEST_NFS_CSI_PORT}`,
    '--node-id',
    NODE_ID,
    '--region',
    'homelab',
    '--zone',
    'hyper1',
    '--kubelet-dir',
    GUEST_KUBELET_DIR,
    '--metrics-address',
    `127.0.0.1:${GUEST_METRICS_PORT}`,
    process.env.VM_NODE_ARGS ?? '',
  ].join(' ');
}

function guestEnv(g: Guest, logDir: string): Record<string, string> {
  const vm = path.join(repoRoot, 'test/vm');
  return {
    VM_PROXMOX_ENDPOINT: `dns:///127.0.0.1:${g.hostPort(GUEST_PROXMOX_PORT)}`,
    VM_NFS_ENDPOINT: `dns:///127.0.0.1:${g.hostPort(GUEST_NFS_CSI_PORT)}`,
    VM_METRICS_ADDRESS: `127.0.0.1:${g.hostPort(GUEST_METRICS_PORT)}`,
    VM_QMP_SOCKET: g.qmpSocket,
    VM_QGA_SOCKET: g.qgaSocket,
    VM_NFS_SERVER: '127.0.0.1',
    VM_NFS_SHARE: '/volume1/k8s-volumes/talos',
    VM_NFS_PORT: String(g.nfsPort),
    VM_NFS_MOUNT_PORT: String(g.nfsMountPort),
    VM_NODE_ID: NODE_ID,
    VM_EXEC: path.join(vm, 'guest-exec.sh'),
    VM_PATH_CREATE: path.join(vm, 'sanity/create-path.sh'),
    VM_PATH_REMOVE: path.join(vm, 'sanity/remove-path.sh'),
    VM_PATH_CHECK: path.join(vm, 'sanity/check-path.sh'),
    VM_NODE_LOG: g.runLog,
    VM_CONSOLE_LOG: g.consoleLog,
    VM_LOG_DIR: logDir,
    VM_GUEST_DIR: g.dir,
  };
}

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  if (argv[0] === '--') argv.shift();
  if (argv.length === 0) {
    log('usage: test/vm/vm.sh run -- COMMAND [ARG...]');
    return 2;
  }
  const logDir = process.env.VM_LOG_DIR ?? path.join(repoRoot, '.run/vm');
  const readyS = Number(process.env.VM_READY_TIMEOUT ?? 300);
  let child: ChildProcess | undefined;
  let guest: Guest | undefined;
  let interrupted = 0;
  const abort = new AbortController();

  const onSignal = (sig: NodeJS.Signals, code: number) => () => {
    if (interrupted) {
      // Second signal: no more patience. The 'exit' hook of guest.ts still kills QEMU.
      child?.kill('SIGKILL');
      process.exit(code);
    }
    interrupted = code;
    log(`vm: ${sig}: stopping`);
    abort.abort();
    child?.kill(sig);
  };
  process.on('SIGINT', onSignal('SIGINT', 130));
  process.on('SIGTERM', onSignal('SIGTERM', 143));
  process.on('SIGHUP', onSignal('SIGHUP', 129));

  try {
    guest = await startGuest({
      forwards: [GUEST_PROXMOX_PORT, GUEST_NFS_CSI_PORT, GUEST_METRICS_PORT].map((guestPort) => ({ guestPort })),
      waitPorts: [GUEST_PROXMOX_PORT, GUEST_NFS_CSI_PORT],
      run: `cd ${shq(repoRoot)}\n${nodeCommand()}\n`,
      env: {
        GUEST_PROXMOX_PORT: String(GUEST_PROXMOX_PORT),
        GUEST_NFS_CSI_PORT: String(GUEST_NFS_CSI_PORT),
        REPO: repoRoot,
      },
      logDir,
      readyTimeoutMs: readyS * 1000,
      handleSignals: false,
      signal: abort.signal,
    });
    if (interrupted) return interrupted;
    const env = guestEnv(guest, logDir);
    for (const [k, v] of Object.entries(env)) log(`vm: ${k}=${v}`);
    const t = Date.now();
    // Tethered, so the command doesn't outlive a harness that is SIGKILLed.
    const running = spawn('bash', [path.join(repoRoot, 'test/vm/tether.sh'), '3', '-', ...argv], {
      stdio: ['inherit', 'inherit', 'inherit', 'pipe'],
      env: { ...process.env, ...env },
    });
    child = running;
    const code = await new Promise<number>((resolve) => {
      running.on('error', (e) => {
        log(`vm: cannot run ${argv[0] ?? ''}: ${e.message}`);
        resolve(127);
      });
      running.on('exit', (c, s) => resolve(c ?? 128 + (s ? os.constants.signals[s] : 0)));
    });
    log(`vm: command exited with ${code} after ${((Date.now() - t) / 1000).toFixed(1)}s`);
    const ended = guest.runExitCode();
    if (ended !== undefined) {
      log(
        `vm: WARNING: the node plugin in the guest exited with ${ended} during the run; see ${path.join(logDir, 'run.log')}`,
      );
    }
    return interrupted || code;
  } catch (e) {
    log(`vm: ${e instanceof Error ? e.message : String(e)}`);
    return interrupted || 1;
  } finally {
    await guest?.stop();
    log(`vm: logs in ${logDir}`);
  }
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
