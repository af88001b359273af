// What each driver needs around it on the host tier: the Proxmox simulator with loop-device
// disks, or a ganesha NFS server; and the flags/parameters that point the program and
// csi-sanity at them. Shared by the sanity runs, the demo and the benchmarks.
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { DEFAULT_CONFIG_PATH, type RunningSimulator, startSimulator } from '../../sim/index.js';
import { BUILTIN_ROLES } from '../../sim/model/privileges.js';
import { SNAPSHOT_PRIVILEGES } from '../../src/cli/privileges.js';
import { parse as parseYaml } from 'yaml';
import { defined } from '../../src/defined.js';
import { undoOnExit } from './reaper.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** The VolumeAttributesClass the ModifyVolume specs apply: every mutable key upstream offers but replication. */
export const PROXMOX_SANITY_MUTABLE = { backup: 'false', diskIOPS: '500', diskMBps: '40' };

export interface Backends<Info extends Record<string, string> = Record<string, string>> {
  controllerArgs: string[];
  nodeArgs: string[];
  /** StorageClass parameters for test volumes. */
  volumeParameters: Record<string, string>;
  mutableParameters?: Record<string, string>;
  sanityArgs: string[];
  /** Extra facts for the demo and benchmarks (simulator admin URL, export directory…). */
  info: Info;
  close(): Promise<void>;
}

export interface ProxmoxInfo extends Record<string, string> {
  adminUrl: string;
  url: string;
  config: string;
}

export interface NfsInfo extends Record<string, string> {
  exportDir: string;
  server: string;
  share: string;
  nfsPort: string;
  mountPort: string;
}

/**
 * Writes the program's --proxmox-config file pointing at a running simulator (its CA pinned), or
 * at any API URL: without a CA file the certificate is not checked (a server that never answers).
 */
export function writeProxmoxConfig(
  file: string,
  sim: Pick<RunningSimulator, 'url' | 'tokenId' | 'tokenSecret'> & { caFile?: string },
  region = HOST_NODE.region,
): void {
  fs.writeFileSync(
    file,
    [
      'clusters:',
      `  - url: ${sim.url}`,
      `    insecure: ${sim.caFile === undefined}`,
      `    token_id: "${sim.tokenId}"`,
      `    token_secret: "${sim.tokenSecret}"`,
      ...(sim.caFile === undefined ? [] : [`    ca_file: ${sim.caFile}`]),
      `    region: ${region}`,
      '',
    ].join('\n'),
  );
}

/** The host-tier VM: the node plugin on this host plays talos-worker-1 on hyper1. */
export const HOST_NODE = { name: 'talos-worker-1', region: 'homelab', zone: 'hyper1' };

/** The node plugin's identity flags: the node it plays and that node's topology. */
export const nodeIdentityArgs = (node: typeof HOST_NODE = HOST_NODE): string[] => [
  '--node-id',
  node.name,
  '--region',
  node.region,
  '--zone',
  node.zone,
];

/** Both drivers served on unix sockets (`--mode all` or node mode). */
export const socketEndpointArgs = (proxmoxSock: string, nfsSock: string): string[] => [
  '--proxmox-endpoint',
  `unix://${proxmoxSock}`,
  '--nfs-endpoint',
  `unix://${nfsSock}`,
];

export async function startProxmoxBackend(
  runDir: string,
  opts: {
    backend?: 'loop' | 'none' | 'qmp';
    qmp?: Record<number, string>;
    /** The simulated cluster (default sim/default-cluster.yaml): a path or the parsed object. */
    config?: string | object;
  } = {},
): Promise<Backends<ProxmoxInfo>> {
  const linkDir = path.join(runDir, 'links');
  // The driver's token with what snapshots add (privileges.ts snapshotNeeds): the snapshot specs run.
  const config = parseYaml(fs.readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as { tokens: Array<Record<string, unknown>> };
  const csiToken = config.tokens[0] ?? {};
  config.tokens[0] = {
    id: csiToken.id,
    secret: csiToken.secret,
    privileges: [...new Set([...(BUILTIN_ROLES.CSI ?? []), ...SNAPSHOT_PRIVILEGES])],
  };
  const sim = await startSimulator({
    config,
    backend: opts.backend ?? 'loop',
    stateDir: path.join(runDir, 'sim'),
    loopLinkDir: linkDir,
    ...(opts.qmp && { qmp: opts.qmp }),
    ...(opts.config && { config: opts.config }),
  });
  const cfg = path.join(runDir, 'proxmox-config.yaml');
  writeProxmoxConfig(cfg, sim);
  return {
    controllerArgs: ['--proxmox-config', cfg],
    nodeArgs: [...nodeIdentityArgs(), '--device-dir', path.join(linkDir, HOST_NODE.name)],
    volumeParameters: { storage: 'local-lvm' },
    mutableParameters: PROXMOX_SANITY_MUTABLE,
    // 1 GiB test volumes keep mkfs and loop devices quick; expansion goes to 2 GiB.
    sanityArgs: ['--csi.testvolumesize=1073741824', '--csi.testnodevolumeattachlimit'],
    info: { adminUrl: sim.adminUrl, url: sim.url, config: cfg },
    close: () => sim.close(),
  };
}

export async function startNfsBackend(runDir: string, o: { v4only?: boolean } = {}): Promise<Backends<NfsInfo>> {
  const dir = path.join(runDir, 'ganesha');
  const stop = [path.join(ROOT, 'scripts/ganesha.sh'), 'stop', '--dir', dir];
  // ganesha daemonizes: registered before it starts, so even a harness killed meanwhile stops it.
  const release = undoOnExit({ run: ['bash', ...stop] });
  const out = execFileSync(
    'bash',
    [path.join(ROOT, 'scripts/ganesha.sh'), 'start', '--dir', dir, ...(o.v4only ? ['--protocols', '4'] : [])],
    { encoding: 'utf8' },
  );
  // ganesha.sh prints its JSON summary as the last line.
  const g = JSON.parse(defined(out.trim().split('\n').at(-1), 'ganesha.sh output')) as {
    server: string;
    share: string;
    nfsPort: number;
    mountPort: number;
    exportDir: string;
  };
  return {
    controllerArgs: ['--nfs-port', String(g.nfsPort), '--nfs-mount-port', String(g.mountPort)],
    nodeArgs: ['--node-id', HOST_NODE.name],
    volumeParameters: { server: g.server, share: `${g.share}/talos` },
    // The host kernel has no NFS client, so node specs (which mount) cannot run here; they run
    // against the guest kernel in the VM tier (`npm run sanity -- nfs --vm`).
    sanityArgs: ['--ginkgo.skip=Node Service'],
    info: {
      exportDir: g.exportDir,
      server: g.server,
      share: g.share,
      nfsPort: String(g.nfsPort),
      mountPort: String(g.mountPort),
    },
    close: async () => {
      execFileSync('bash', stop, { stdio: 'ignore' });
      release();
    },
  };
}

export const startBackends = (
  driver: 'proxmox' | 'nfs',
  runDir: string,
  o: { v4only?: boolean } = {},
): Promise<Backends> => (driver === 'proxmox' ? startProxmoxBackend(runDir) : startNfsBackend(runDir, o));
