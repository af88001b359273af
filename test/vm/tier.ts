// The VM tier, run by `test/vm/vm.sh run -- node --import=tsx test/vm/tier.ts <what>` once the
// guest is up with the node plugin inside it (VM_* variables, see test/vm/README.md):
//   sanity proxmox|nfs [-- extra csi-sanity flags]   controller here, node in the guest, full suite
//   sanity nfs4 [-- flags]                            the NFS suite with the guest's nfsd serving NFSv4 only
//   e2e                                               the end-to-end scenario (test/vm/e2e.ts)
//   luks                                              LUKS-encrypted Proxmox volumes (test/vm/luks.ts)
//   inline                                            CSI inline NFS volumes (test/vm/inline-nfs.ts)
//   move                                              a volume's bytes carried to another host (test/vm/move.ts)
//   server-copy                                       the NFS tree copy with and without NFSv4.2 COPY/CLONE (test/vm/server-copy.ts)
//   all                                               both sanity runs, the scenario, LUKS, inline, move, server-copy, then nfs4
// The Proxmox simulator hot-plugs disks into the guest over QMP exactly as Proxmox does.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { start, stopAll } from '../harness/procs.js';
import { PROXMOX_SANITY_MUTABLE, startProxmoxBackend, type Backends } from '../harness/backends.js';
import { runSanity } from '../sanity/run.js';
import { runE2e } from './e2e.js';
import { runLuks } from './luks.js';
import { runInlineNfs } from './inline-nfs.js';
import { runMove } from './move.js';
import { runServerCopy } from './server-copy.js';
import { GUEST_KUBELET_DIR } from './guest-paths.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const MAIN = path.join(ROOT, 'dist/src/main.js');
/** The guest plays talos-worker-1 (VMID 111 on hyper1 in sim/default-cluster.yaml). */
const GUEST_VMID = 111;

function need(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run through test/vm/vm.sh run -- …`);
  return v;
}

function freshDir(name: string): string {
  const dir = path.join(ROOT, '.run', name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

export interface Controller {
  endpoint: string;
  pve?: Backends;
  stop(): Promise<void>;
}

/**
 * The controller side on the host for one driver, pointed at the guest's VM / NFS server.
 * `alsoPlays`: more VMIDs the guest stands in for (one at a time), e.g. a node VM on another host.
 */
export async function startController(
  driver: 'proxmox' | 'nfs',
  runDir: string,
  o: { alsoPlays?: number[] } = {},
): Promise<Controller> {
  const sock = path.join(runDir, 'controller.sock');
  let pve: Backends | undefined;
  let args: string[];
  if (driver === 'proxmox') {
    const qmp = Object.fromEntries([GUEST_VMID, ...(o.alsoPlays ?? [])].map((id) => [id, need('VM_QMP_SOCKET')]));
    pve = await startProxmoxBackend(runDir, { backend: 'qmp', qmp });
    args = ['--proxmox-endpoint', `unix://${sock}`, ...pve.controllerArgs];
  } else {
    args = [
      '--nfs-endpoint',
      `unix://${sock}`,
      '--nfs-port',
      need('VM_NFS_PORT'),
      '--nfs-mount-port',
      need('VM_NFS_MOUNT_PORT'),
    ];
  }
  const proc = start(
    `${driver} controller`,
    process.execPath,
    [MAIN, '--mode', 'controller', ...args, '--log-level', 'debug'],
    {
      logFile: path.join(runDir, 'controller.log'),
    },
  );
  try {
    await proc.readyJson((j) => j.ready === true, 30_000);
  } catch (e) {
    await pve?.close();
    throw e;
  }
  return {
    endpoint: `unix://${sock}`,
    ...(pve && { pve }),
    stop: async () => {
      await proc.stop();
      await pve?.close();
    },
  };
}

/**
 * The guest's kernel nfsd with NFSv3 switched off (`rpc.nfsd -N 3`, what a hardened NAS does);
 * the controller finds no v3 service and provisions over NFSv4, the node mounts v4.
 */
async function sanityNfsV4Only(extra: string[]): Promise<number> {
  const nfsd = (flags: string) =>
    execFileSync(
      need('VM_EXEC'),
      [
        'sh',
        '-c',
        `rpc.nfsd 0 && rpc.nfsd ${flags} -p 2049 4 && echo Y >/proc/fs/nfsd/v4_end_grace; cat /proc/fs/nfsd/versions`,
      ],
      { encoding: 'utf8' },
    ).trim();
  const versions = nfsd('-N 3');
  console.log(`guest nfsd versions: ${versions}`);
  if (!/-3/.test(versions)) throw new Error(`NFSv3 is still on in the guest's nfsd: ${versions}`);
  try {
    return await sanity('nfs', extra, 'nfs-v4only');
  } finally {
    console.log(`guest nfsd versions restored: ${nfsd('')}`);
  }
}

async function sanity(driver: 'proxmox' | 'nfs', extra: string[], name: string = driver): Promise<number> {
  const runDir = freshDir(`vm-sanity-${name}`);
  const ctrl = await startController(driver, runDir);
  try {
    const guestDir = `${GUEST_KUBELET_DIR}/csi-sanity/${driver}`;
    return await runSanity({
      label: `${name} (VM tier)`,
      runDir,
      nodeEndpoint: need(driver === 'proxmox' ? 'VM_PROXMOX_ENDPOINT' : 'VM_NFS_ENDPOINT'),
      controllerEndpoint: ctrl.endpoint,
      volumeParameters:
        driver === 'proxmox'
          ? { storage: 'local-lvm' }
          : { server: need('VM_NFS_SERVER'), share: need('VM_NFS_SHARE') },
      ...(driver === 'proxmox' ? { mutableParameters: PROXMOX_SANITY_MUTABLE } : {}),
      mountDir: `${guestDir}/mnt`,
      stagingDir: `${guestDir}/staging`,
      pathCommands: { create: need('VM_PATH_CREATE'), remove: need('VM_PATH_REMOVE'), check: need('VM_PATH_CHECK') },
      // 1 GiB test volumes keep mkfs in the emulated guest quick.
      args: [...(driver === 'proxmox' ? ['--csi.testvolumesize=1073741824'] : []), ...extra],
    });
  } finally {
    await ctrl.stop();
  }
}

async function timed(name: string, fn: () => Promise<number>): Promise<number> {
  const t0 = Date.now();
  console.log(`--- VM tier: ${name}`);
  let code: number;
  try {
    code = await fn();
  } catch (e) {
    console.error(`${name}: ${e instanceof Error ? e.stack : String(e)}`);
    code = 1;
  }
  console.log(
    `--- VM tier: ${name}: ${code === 0 ? 'ok' : `FAILED (${code})`} in ${((Date.now() - t0) / 1000).toFixed(1)} s`,
  );
  return code;
}

async function main(): Promise<number> {
  const [what, ...rest] = process.argv.slice(2);
  const sep = rest.indexOf('--');
  const extra = sep >= 0 ? rest.slice(sep + 1) : [];
  const driver = rest[0];
  switch (what) {
    case 'sanity':
      if (driver === 'nfs4') return timed('csi-sanity nfs, NFSv4-only nfsd', () => sanityNfsV4Only(extra));
      if (driver !== 'proxmox' && driver !== 'nfs') break;
      return timed(`csi-sanity ${driver}`, () => sanity(driver, extra));
    case 'e2e':
      return timed('end-to-end scenario', () => runE2e({ freshDir, startController }));
    case 'luks':
      return timed('LUKS volumes', () => runLuks({ freshDir, startController }));
    case 'inline':
      return timed('inline NFS volumes', () => runInlineNfs());
    case 'move':
      return timed('move a volume to another host', () => runMove({ freshDir, startController }));
    case 'server-copy':
      return timed('NFS server-side copy', () => runServerCopy());
    case 'all': {
      const codes = [
        await timed('csi-sanity proxmox', () => sanity('proxmox', [])),
        await timed('csi-sanity nfs', () => sanity('nfs', [])),
        await timed('end-to-end scenario', () => runE2e({ freshDir, startController })),
        await timed('LUKS volumes', () => runLuks({ freshDir, startController })),
        await timed('inline NFS volumes', () => runInlineNfs()),
        await timed('move a volume to another host', () => runMove({ freshDir, startController })),
        await timed('NFS server-side copy', () => runServerCopy()),
        // Last: it switches the guest's nfsd to NFSv4 only (and back) for the controller's v4 client.
        await timed('csi-sanity nfs, NFSv4-only nfsd', () => sanityNfsV4Only([])),
      ];
      return codes.some((c) => c !== 0) ? 1 : 0;
    }
    case undefined: // no argument: the usage line below
      break;
  }
  console.error(
    'usage: vm-tier.ts sanity proxmox|nfs|nfs4 [-- flags] | e2e | luks | inline | move | server-copy | all',
  );
  return 2;
}

main()
  .then(async (code) => {
    await stopAll();
    process.exit(code);
  })
  .catch(async (e: unknown) => {
    console.error(e);
    await stopAll();
    process.exit(1);
  });
