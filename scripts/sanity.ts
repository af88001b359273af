// `npm run sanity -- <proxmox|nfs> [--vm] [-- extra csi-sanity flags]`
// Starts what the driver needs (the Proxmox simulator with loop-device disks, or ganesha), the
// program as two processes (controller mode and node mode, each on its own endpoint), and runs
// the real csi-sanity against them. Prints csi-sanity's summary; exits non-zero on any failure.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { run, start, stopAll } from './lib/procs.js';
import { startBackends, type Backends } from './lib/backends.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const sep = argv.indexOf('--');
const own = sep >= 0 ? argv.slice(0, sep) : argv;
const extra = sep >= 0 ? argv.slice(sep + 1) : [];
const driver = own.find((a) => !a.startsWith('-'));
const vm = own.includes('--vm');
if (driver !== 'proxmox' && driver !== 'nfs') {
  console.error('usage: npm run sanity -- <proxmox|nfs> [--vm] [-- extra csi-sanity flags]');
  process.exit(2);
}

const block = extra.some((a) => /testvolumeaccesstype[= ]?block/.test(a)) || extra.join(' ').includes('testvolumeaccesstype block');
const runDir = path.join(ROOT, '.run', `sanity-${driver}${block ? '-block' : ''}${vm ? '-vm' : ''}`);
fs.rmSync(runDir, { recursive: true, force: true });
fs.mkdirSync(runDir, { recursive: true });
const sanityBin = process.env.CSI_SANITY ?? path.join(ROOT, '.tools', 'csi-sanity');
const main = path.join(ROOT, 'dist', 'src', 'main.js');

let backends: Backends | undefined;
async function cleanup(): Promise<void> {
  await stopAll();
  await backends?.close();
}

async function mainFn(): Promise<number> {
  if (vm) {
    console.error('--vm runs through scripts/vm-tier.sh (it boots the guest first)');
    return 2;
  }
  backends = await startBackends(driver as 'proxmox' | 'nfs', runDir);
  const flag = driver === 'proxmox' ? '--proxmox-endpoint' : '--nfs-endpoint';
  const ctrlSock = path.join(runDir, 'controller.sock');
  const nodeSock = path.join(runDir, 'node.sock');
  const ctrl = start('controller', process.execPath, [main, '--mode', 'controller', flag, `unix://${ctrlSock}`, ...backends.controllerArgs, '--log-level', 'debug'], {
    logFile: path.join(runDir, 'controller.log'),
  });
  const node = start('node', process.execPath, [main, '--mode', 'node', flag, `unix://${nodeSock}`, ...backends.nodeArgs, '--log-level', 'debug'], {
    logFile: path.join(runDir, 'node.log'),
  });
  await Promise.all([ctrl.readyJson((j) => j.ready === true, 30_000), node.readyJson((j) => j.ready === true, 30_000)]);

  const params = path.join(runDir, 'params.yaml');
  fs.writeFileSync(params, Object.entries(backends.volumeParameters).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join('\n') + '\n');
  const args = [
    `--csi.endpoint=unix://${nodeSock}`,
    `--csi.controllerendpoint=unix://${ctrlSock}`,
    `--csi.mountdir=${path.join(runDir, 'mnt')}`,
    `--csi.stagingdir=${path.join(runDir, 'staging')}`,
    `--csi.testvolumeparameters=${params}`,
    `--ginkgo.junit-report=${path.join(runDir, 'junit.xml')}`,
    '--ginkgo.no-color',
    ...backends.sanityArgs,
    ...extra,
  ];
  const out = path.join(runDir, 'csi-sanity.log');
  console.log(`csi-sanity ${driver}${block ? ' (block)' : ''}: ${args.join(' ')}`);
  const t0 = Date.now();
  const code = await run(sanityBin, args, { stdoutFile: out });
  const text = fs.readFileSync(out, 'utf8');
  // csi-sanity's own summary: failures with their location, then the counts.
  const summary = text.split('\n').filter((l) => /^\s*\[(FAIL|PANICKED)\]|^Ran \d+ of|^(SUCCESS|FAIL)!|Summarizing/.test(l));
  console.log(summary.join('\n'));
  console.log(`csi-sanity ${driver}: exit ${code} in ${((Date.now() - t0) / 1000).toFixed(1)} s; full log ${path.relative(ROOT, out)}`);
  return code;
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
