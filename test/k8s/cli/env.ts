// What the day-2 CLI tests run against: a real etcd + kube-apiserver (no controllers: the tests
// create the objects the provisioner and attach/detach controller would), the Proxmox simulator
// (no disk backend: state only) and ganesha. Subcommands run in-process through the same
// dispatch as `pve-nfs-csi <command>`, with their stdout, stderr and exit code captured.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_CONFIG_PATH, startSimulator, type RunningSimulator } from '../../../sim/index.js';
import { freePort } from '../../helpers/free-port.js';
import { SimulatorAdmin } from '../../../sim/index.js';
import { runSubcommand } from '../../../src/cli/index.js';
import { readProxmoxConfig } from '../../../src/config/proxmox-file.js';
import { createHttpProxmoxApi, type HttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { API_ONLY, binaries, ROOT, startCluster, type Cluster } from '../lib/cluster.js';

const AUDITOR = { id: 'auditor@pve!ro', secret: '11111111-2222-3333-4444-555555555555', role: 'PVEAuditor' };

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
  stop(ok: boolean): Promise<void>;
}

export async function startCliEnv(): Promise<CliEnv> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'k8s-cli-'));
  const cluster = await startCluster(path.join(dir, 'k8s'), binaries(API_ONLY), { controllerManager: false });
  // The seed's homelab, plus a read-only token (PVEAuditor) for the privilege checks.
  const simConfig = parseYaml(fs.readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as { tokens: unknown[] };
  simConfig.tokens.push(AUDITOR);
  const pve = await startSimulator({ backend: 'none', config: simConfig, stateDir: path.join(dir, 'pve') });
  const configFile = (id: string, secret: string) => {
    const file = path.join(dir, `proxmox-${id.replace(/\W/g, '_')}.yaml`);
    fs.writeFileSync(
      file,
      [
        'clusters:',
        `  - url: ${pve.url}`,
        '    insecure: false',
        `    token_id: "${id}"`,
        `    token_secret: "${secret}"`,
        `    ca_file: ${pve.caFile}`,
        '    region: homelab',
        '',
      ].join('\n'),
    );
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
    async stop(ok) {
      await api.close();
      stopGanesha();
      await pve.close();
      await cluster.stop();
      if (ok) fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
