// What the day-2 CLI tests run against: a real etcd + kube-apiserver (no controllers: the tests
// create the objects the provisioner and attach/detach controller would), the Proxmox simulator
// (no disk backend: state only) and ganesha. Subcommands run in-process through the same
// dispatch as `pve-nfs-csi <command>`, with their stdout, stderr and exit code captured.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { startSimulator, type RunningSimulator } from '../../../sim/index.js';
import { AUDITOR, defaultConfig } from '../../../sim/test/fixtures/helpers.js';
import { writeProxmoxConfig } from '../../harness/backends.js';
import { freePort } from '../../helpers/free-port.js';
import { SimulatorAdmin } from '../../../sim/index.js';
import { runSubcommand } from '../../../src/cli/index.js';
import { readProxmoxConfig } from '../../../src/config/proxmox-file.js';
import { createHttpProxmoxApi, type HttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { API_ONLY, binaries, ROOT, startCluster, type Cluster } from '../lib/cluster.js';

export interface CliEnv {
  dir: string;
  cluster: Cluster;
  pve: RunningSimulator;
  /** The driver's config.yaml (CSI role token) and one with a read-only PVEAuditor token. */
  config: string;
  auditorConfig: string;
  nfs: { server: string; share: string; nfsPort: number; mountPort: number; exportDir: string };
  sim: SimulatorAdmin;
  api: HttpProxmoxApi;
  /** ganesha's export directory on this host (the share's files, for setting up and checking). */
  exportDir: string;
  nfsServer: string;
  nfsShare: string;
  /** Flags every run needs: kubeconfig, Proxmox config, ganesha's ports. */
  baseArgs: string[];
  run(argv: string[]): Promise<{ code: number; out: string; err: string }>;
  /** The share the seed's NFS class provisions under (`<share>/talos`), and its directory here. */
  talos: { share: string; dir: string };
  /** Whether `p` (relative to the talos directory) exists. */
  exists: (p: string) => boolean;
  /** Makes directory `p` under the talos directory with files of the given sizes (bytes of 1). */
  mkdir: (p: string, files?: Record<string, number>) => void;
  /** The seed's NFS StorageClass syno-nfs-csi: <namespace>/<pvc> directories under the talos share. */
  createNfsClass(onDelete: 'delete' | 'archive'): Promise<void>;
  /** A 1 GiB CSI PersistentVolume, as the provisioner (or an admin's static PV) makes it. */
  createPv(name: string, pv: CsiPv): Promise<void>;
  stop(ok: boolean): Promise<void>;
}

export interface CsiPv {
  accessMode: 'ReadWriteOnce' | 'ReadWriteMany' | 'ReadOnlyMany';
  storageClassName: string;
  reclaimPolicy?: 'Delete';
  csi: { driver: string; volumeHandle: string; fsType?: string; volumeAttributes?: Record<string, string> };
}

export async function startCliEnv(): Promise<CliEnv> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'k8s-cli-'));
  const cluster = await startCluster(path.join(dir, 'k8s'), binaries(API_ONLY), { controllerManager: false });
  // The seed's homelab, plus a read-only token (PVEAuditor) for the privilege checks.
  const simConfig = defaultConfig();
  simConfig.tokens.push(AUDITOR);
  const pve = await startSimulator({ backend: 'none', config: simConfig, stateDir: path.join(dir, 'pve') });
  const configFile = (id: string, secret: string) => {
    const file = path.join(dir, `proxmox-${id.replace(/\W/g, '_')}.yaml`);
    writeProxmoxConfig(file, { url: pve.url, caFile: pve.caFile, tokenId: id, tokenSecret: secret });
    return file;
  };
  const config = configFile(pve.tokenId, pve.tokenSecret);
  const auditorConfig = configFile(AUDITOR.id, AUDITOR.secret);
  // ganesha on free ports (other runs on this machine may hold the default ones).
  const ganeshaDir = path.join(dir, 'ganesha');
  let nfs: CliEnv['nfs'];
  try {
    const out = execFileSync(
      'bash',
      [
        path.join(ROOT, 'scripts/ganesha.sh'),
        'start',
        '--dir',
        ganeshaDir,
        '--nfs-port',
        String(await freePort()),
        '--mount-port',
        String(await freePort()),
      ],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
    );
    nfs = JSON.parse(out.trim().split('\n').pop() ?? '') as CliEnv['nfs'];
  } catch (e) {
    await pve.close();
    await cluster.stop();
    throw e;
  }
  const stopGanesha = () =>
    execFileSync('bash', [path.join(ROOT, 'scripts/ganesha.sh'), 'stop', '--dir', ganeshaDir], { stdio: 'ignore' });
  // Even when a test crashes before its teardown: ganesha is a daemon, not our child.
  process.once('exit', () => {
    try {
      stopGanesha();
    } catch {
      /* stopped already */
    }
  });
  const [first] = readProxmoxConfig(config).clusters;
  if (!first) throw new Error('no cluster in the config');
  const api = createHttpProxmoxApi({ cluster: first, queryTimeoutMs: 10_000 });
  const baseArgs = [
    '--kubeconfig',
    cluster.adminConfig,
    '--config',
    config,
    '--nfs-port',
    String(nfs.nfsPort),
    '--nfs-mount-port',
    String(nfs.mountPort),
  ];
  const talos = { share: `${nfs.share}/talos`, dir: path.join(nfs.exportDir, 'talos') };
  return {
    dir,
    cluster,
    pve,
    nfs,
    api,
    config,
    auditorConfig,
    sim: new SimulatorAdmin(pve.adminUrl),
    exportDir: nfs.exportDir,
    nfsServer: nfs.server,
    nfsShare: nfs.share,
    baseArgs,
    async run(argv) {
      const out: string[] = [];
      const err: string[] = [];
      const sink = (a: string[]) =>
        ({ write: (s: string | Uint8Array) => (a.push(String(s)), true) }) as unknown as NodeJS.WritableStream;
      const code = await runSubcommand(argv, { out: sink(out), err: sink(err), env: { HOME: dir } });
      return { code: code ?? -1, out: out.join(''), err: err.join('') };
    },
    talos,
    exists: (p) => fs.existsSync(path.join(talos.dir, p)),
    mkdir: (p, files = {}) => {
      fs.mkdirSync(path.join(talos.dir, p), { recursive: true });
      for (const [f, size] of Object.entries(files)) {
        fs.mkdirSync(path.dirname(path.join(talos.dir, p, f)), { recursive: true });
        fs.writeFileSync(path.join(talos.dir, p, f), Buffer.alloc(size, 1));
      }
    },
    async createNfsClass(onDelete) {
      await cluster.kube.create('/apis/storage.k8s.io/v1/storageclasses', {
        metadata: { name: 'syno-nfs-csi' },
        provisioner: 'nfs.csi.k8s.io',
        parameters: {
          server: nfs.server,
          share: talos.share,
          subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
          onDelete,
        },
      });
    },
    async createPv(name, pv) {
      await cluster.kube.create('/api/v1/persistentvolumes', {
        metadata: { name },
        spec: {
          capacity: { storage: '1Gi' },
          accessModes: [pv.accessMode],
          ...(pv.reclaimPolicy && { persistentVolumeReclaimPolicy: pv.reclaimPolicy }),
          storageClassName: pv.storageClassName,
          csi: pv.csi,
        },
      });
    },
    async stop(ok) {
      await api.close();
      stopGanesha();
      await pve.close();
      await cluster.stop();
      if (ok) fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
