// `npm run sanity -- <proxmox|nfs> [--vm] [-- extra csi-sanity flags]`
// Starts what the driver needs (the Proxmox simulator with loop-device disks, or ganesha), the
// program as two processes (controller mode and node mode, each on its own endpoint), and runs
// the real csi-sanity against them. Prints csi-sanity's summary; exits non-zero on any failure.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { start, stopAll } from '../harness/procs.js';
import { runSanity } from './run.js';
import { startBackends, type Backends } from '../harness/backends.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const argv = process.argv.slice(2);
const sep = argv.indexOf('--');
const own = sep >= 0 ? argv.slice(0, sep) : argv;
const extra = sep >= 0 ? argv.slice(sep + 1) : [];
const driver = own.find((a) => !a.startsWith('-'));
if (driver !== 'proxmox' && driver !== 'nfs') {
  console.error(
    'usage: npm run sanity -- <proxmox|nfs> [--vm] [-- extra csi-sanity flags]  (--vm is handled by test/sanity/sanity.sh)',
  );
  process.exit(2);
}

const block =
  extra.some((a) => /testvolumeaccesstype[= ]?block/.test(a)) || extra.join(' ').includes('testvolumeaccesstype block');
const runDir = path.join(ROOT, '.run', `sanity-${driver}${block ? '-block' : ''}`);
fs.rmSync(runDir, { recursive: true, force: true });
fs.mkdirSync(runDir, { recursive: true });
const main = path.join(ROOT, 'dist', 'src', 'main.js');

let backends: Backends | undefined;
async function cleanup(): Promise<void> {
  await stopAll();
  await backends?.close();
}

async function mainFn(): Promise<number> {
  const code = await runAgainst(runDir, false);
  if (driver !== 'nfs' || code !== 0) return code;
  // The same controller specs against a server that speaks NFSv4 only (no rpcbind, no MOUNT):
  // the controller finds no v3 service and provisions through its NFSv4 client.
  await cleanup();
  const v4Dir = path.join(runDir, 'v4only');
  fs.mkdirSync(v4Dir, { recursive: true });
  return runAgainst(v4Dir, true);
}

async function runAgainst(runDir: string, v4only: boolean): Promise<number> {
  backends = await startBackends(driver as 'proxmox' | 'nfs', runDir, { v4only });
  const flag = driver === 'proxmox' ? '--proxmox-endpoint' : '--nfs-endpoint';
  const ctrlSock = path.join(runDir, 'controller.sock');
  const nodeSock = path.join(runDir, 'node.sock');
  const ctrl = start(
    'controller',
    process.execPath,
    [main, '--mode', 'controller', flag, `unix://${ctrlSock}`, ...backends.controllerArgs, '--log-level', 'debug'],
    {
      logFile: path.join(runDir, 'controller.log'),
    },
  );
  const node = start(
    'node',
    process.execPath,
    [
      main,
      '--mode',
      'node',
      flag,
      `unix://${nodeSock}`,
      ...backends.nodeArgs,
      '--kubelet-dir',
      runDir,
      '--log-level',
      'debug',
    ],
    {
      logFile: path.join(runDir, 'node.log'),
    },
  );
  await Promise.all([ctrl.readyJson((j) => j.ready === true, 30_000), node.readyJson((j) => j.ready === true, 30_000)]);

  const base = {
    runDir,
    volumeParameters: backends.volumeParameters,
    mutableParameters: backends.mutableParameters,
    mountDir: path.join(runDir, 'mnt'),
    stagingDir: path.join(runDir, 'staging'),
  };
  const code = await runSanity({
    ...base,
    label: `${driver}${block ? ' (block)' : ''}${v4only ? ' (NFSv4-only server)' : ''}`,
    nodeEndpoint: `unix://${nodeSock}`,
    controllerEndpoint: `unix://${ctrlSock}`,
    args: [...backends.sanityArgs, ...extra],
  });
  // csi-sanity asks Identity only on --csi.endpoint (the node process); the controller-mode
  // process must answer it as well, so its endpoint gets an Identity pass of its own.
  const identity = await runSanity({
    ...base,
    runDir: fs.mkdtempSync(path.join(runDir, 'identity-')),
    label: `${driver} Identity on the controller-mode endpoint`,
    nodeEndpoint: `unix://${ctrlSock}`,
    controllerEndpoint: `unix://${ctrlSock}`,
    args: ['--ginkgo.focus=Identity Service'],
  });
  return code || identity;
}

mainFn()
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  })
  .catch(async (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    await cleanup();
    process.exit(1);
  });
