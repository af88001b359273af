// Flags and environment → AppConfig. Flags win over environment; every error is a ConfigError
// naming the flag or key, raised before any socket is opened.
import { parseArgs } from 'node:util';
import { ConfigError } from './errors.js';
import { readProxmoxConfig } from './proxmox-file.js';
import type { AppConfig, Mode } from './types.js';
import { parseEndpoint, splitHostPort } from './endpoint.js';
import { hasControlCharacter } from '../control-characters.js';

const OPTIONS = {
  mode: { type: 'string', env: 'CSI_MODE' },
  'proxmox-endpoint': { type: 'string', env: 'PROXMOX_CSI_ENDPOINT' },
  'nfs-endpoint': { type: 'string', env: 'NFS_CSI_ENDPOINT' },
  'proxmox-config': { type: 'string', env: 'PROXMOX_CSI_CONFIG' },
  'node-id': { type: 'string', env: 'NODE_NAME' },
  region: { type: 'string', env: 'CSI_REGION' },
  zone: { type: 'string', env: 'CSI_ZONE' },
  'device-dir': { type: 'string', env: 'CSI_DEVICE_DIR' },
  'kubelet-dir': { type: 'string', env: 'KUBELET_DIR' },
  'nfs-port': { type: 'string', env: 'NFS_PORT' },
  'nfs-mount-port': { type: 'string', env: 'NFS_MOUNT_PORT' },
  'nfs-mount-timeout': { type: 'string', env: 'NFS_MOUNT_TIMEOUT' },
  'nfs-call-timeout': { type: 'string', env: 'NFS_CALL_TIMEOUT' },
  'default-ondelete-policy': { type: 'string', env: 'NFS_DEFAULT_ONDELETE_POLICY' },
  'metrics-address': { type: 'string', env: 'CSI_METRICS_ADDRESS' },
  'log-level': { type: 'string', env: 'LOG_LEVEL' },
  'drain-timeout': { type: 'string', env: 'CSI_DRAIN_TIMEOUT' },
  'max-volumes-per-node': { type: 'string', env: 'CSI_MAX_VOLUMES_PER_NODE' },
  'pool-guard': { type: 'string', env: 'PROXMOX_POOL_GUARD' },
  'node-topology-labels': { type: 'string', env: 'PROXMOX_NODE_TOPOLOGY_LABELS' },
  'pool-max-fill': { type: 'string', env: 'PROXMOX_POOL_MAX_FILL' },
  'pool-max-overcommit': { type: 'string', env: 'PROXMOX_POOL_MAX_OVERCOMMIT' },
  'findings-interval': { type: 'string', env: 'CSI_FINDINGS_INTERVAL' },
  'findings-call-budget': { type: 'string', env: 'CSI_FINDINGS_CALL_BUDGET' },
  help: { type: 'boolean', env: '' },
  version: { type: 'boolean', env: '' },
} as const;

type Name = keyof typeof OPTIONS;

/** The serving flags, for --help (src/cli/index.ts puts the subcommands above them). */
export const SERVE_FLAGS = `  --mode controller|node|all        services to serve (env CSI_MODE; default all)
  --proxmox-endpoint EP             csi.proxmox.sinextra.dev endpoint, unix:///path or tcp://127.0.0.1:PORT (env PROXMOX_CSI_ENDPOINT)
  --nfs-endpoint EP                 nfs.csi.k8s.io endpoint (env NFS_CSI_ENDPOINT)
  --proxmox-config FILE             Proxmox config.yaml, upstream Secret format (env PROXMOX_CSI_CONFIG)
  --node-id NAME                    this node's name = its Proxmox VM name (env NODE_NAME)
  --region R --zone Z               node topology outside Kubernetes (env CSI_REGION, CSI_ZONE)
  --device-dir DIR                  where wwn-0x… disk links are looked up (env CSI_DEVICE_DIR; default /dev/disk/by-id)
  --kubelet-dir DIR                 node calls act only on paths inside it (env KUBELET_DIR; default /var/lib/kubelet)
  --nfs-port N --nfs-mount-port N   NFS server ports instead of asking its portmapper (env NFS_PORT, NFS_MOUNT_PORT)
  --nfs-mount-timeout DUR           bound for one NFS mount on the node (default 2m)
  --nfs-call-timeout DUR            bound for one NFS protocol call from the controller (default 10s)
  --default-ondelete-policy P       NFS: delete|retain|archive for handles without onDelete, as csi-driver-nfs's flag (env NFS_DEFAULT_ONDELETE_POLICY; default delete)
  --metrics-address HOST:PORT       Prometheus metrics (env CSI_METRICS_ADDRESS)
  --log-level LEVEL                 trace|debug|info|warn|error (env LOG_LEVEL; default info)
  --drain-timeout DUR               how long SIGTERM waits for calls in flight (default 30s)
  --max-volumes-per-node N          Proxmox: at most N of this driver's disks per node, reported to kubelet (env CSI_MAX_VOLUMES_PER_NODE; default 0 = the free SCSI slots)
  --pool-guard on|off               Proxmox thin-pool guard: refuse volumes that could over-fill a pool (default on; docs/operations.md)
  --pool-max-fill PERCENT           the guard's fill limit: used + the new size within this share of the pool (default 90; 0 = no limit)
  --pool-max-overcommit RATIO       the guard's over-commit limit: virtual sizes / pool size (default 0 = no limit)
  --node-topology-labels on|off     Proxmox controller: keep each Node's topology.kubernetes.io/region and zone labels where its VM runs (default on)
  --findings-interval DUR           how often the controller refreshes the day-2 findings metrics (default 5m; 0 = off)
  --findings-call-budget N          at most N Proxmox calls per minute for them (default 30)`;

export function parseDuration(raw: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(raw.trim());
  if (!m) throw new ConfigError(`--${flag}: "${raw}" is not a duration (e.g. 500ms, 30s, 2m)`);
  const mult = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] ?? 's'] ?? 1000;
  return Math.round(Number(m[1]) * mult);
}

function port(raw: string | undefined, flag: string): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 65535) throw new ConfigError(`--${flag}: "${raw}" is not a TCP port`);
  return n;
}

export type LoadResult = { kind: 'run'; config: AppConfig } | { kind: 'help' } | { kind: 'version' };

export function loadConfig(argv: string[], env: NodeJS.ProcessEnv): LoadResult {
  let values: Partial<Record<Name, string | boolean>>;
  try {
    const options = Object.fromEntries(Object.entries(OPTIONS).map(([k, v]) => [k, { type: v.type }]));
    ({ values } = parseArgs({ args: argv, options: options as never, strict: true, allowPositionals: false }) as never);
  } catch (e) {
    throw new ConfigError(`${(e as Error).message.split('\n')[0]} (see --help)`);
  }
  if (values.help) return { kind: 'help' };
  if (values.version) return { kind: 'version' };
  const get = (name: Name): string | undefined => {
    const v = values[name];
    if (typeof v === 'string') return v;
    const e = OPTIONS[name].env;
    return e && env[e] !== undefined && env[e] !== '' ? env[e] : undefined;
  };

  const mode = (get('mode') ?? 'all') as Mode;
  if (!['controller', 'node', 'all'].includes(mode))
    throw new ConfigError(`--mode: "${mode}" must be controller, node or all`);
  const proxmoxEndpoint = get('proxmox-endpoint');
  const nfsEndpoint = get('nfs-endpoint');
  if (!proxmoxEndpoint && !nfsEndpoint)
    throw new ConfigError('no driver enabled: set --proxmox-endpoint and/or --nfs-endpoint');
  for (const [flag, ep] of [
    ['proxmox-endpoint', proxmoxEndpoint],
    ['nfs-endpoint', nfsEndpoint],
  ] as const) {
    if (!ep) continue;
    try {
      parseEndpoint(ep);
    } catch (e) {
      throw new ConfigError(`--${flag}: ${(e as Error).message}`);
    }
  }
  if (proxmoxEndpoint && nfsEndpoint && proxmoxEndpoint === nfsEndpoint)
    throw new ConfigError('--proxmox-endpoint and --nfs-endpoint must differ');

  const configFile = get('proxmox-config');
  if (proxmoxEndpoint && mode !== 'node' && !configFile) {
    throw new ConfigError('--proxmox-config is required when the Proxmox driver runs its controller');
  }
  const proxmox = configFile ? readProxmoxConfig(configFile) : undefined;

  const nodeId = get('node-id') ?? '';
  if (mode !== 'controller' && !nodeId) throw new ConfigError('--node-id (or NODE_NAME) is required in node mode');
  const metricsAddress = get('metrics-address');
  if (metricsAddress) {
    try {
      splitHostPort(metricsAddress);
    } catch {
      throw new ConfigError(`--metrics-address: "${metricsAddress}" must be HOST:PORT`);
    }
  }
  const logLevel = get('log-level') ?? 'info';
  if (!['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'].includes(logLevel))
    throw new ConfigError(`--log-level: "${logLevel}" is not a level`);
  const region = get('region');
  const zone = get('zone');
  const deviceDir = get('device-dir') ?? '/dev/disk/by-id';
  const kubeletDir = get('kubelet-dir') ?? '/var/lib/kubelet';
  if (!kubeletDir.startsWith('/') || hasControlCharacter(kubeletDir)) {
    throw new ConfigError(`--kubelet-dir: "${kubeletDir}" must be an absolute path`);
  }
  const nfsPort = port(get('nfs-port'), 'nfs-port');
  const nfsMountPort = port(get('nfs-mount-port'), 'nfs-mount-port');
  // csi-driver-nfs compares case-insensitively and treats anything but retain/archive as delete;
  // a typo there silently deletes, so here it is refused.
  const onDeleteRaw = (get('default-ondelete-policy') ?? 'delete').toLowerCase();
  if (!['delete', 'retain', 'archive'].includes(onDeleteRaw)) {
    throw new ConfigError(
      `--default-ondelete-policy: "${get('default-ondelete-policy')}" must be delete, retain or archive`,
    );
  }
  const nfsDefaultOnDelete = onDeleteRaw as 'delete' | 'retain' | 'archive';
  const poolGuard = poolGuardOf(get);
  const findingsIntervalMs = parseDuration(get('findings-interval') ?? '5m', 'findings-interval');
  const maxVolumes = get('max-volumes-per-node') ?? '0';
  // Only a whole number is checked here (the configuration knows no driver); the Proxmox node
  // never reports more than its free SCSI slots, whatever is asked.
  if (!/^\d+$/.test(maxVolumes))
    throw new ConfigError(`--max-volumes-per-node: "${maxVolumes}" must be a whole number (0 = the free SCSI slots)`);
  const topologyLabels = (get('node-topology-labels') ?? 'on').toLowerCase();
  if (!['on', 'off', 'true', 'false'].includes(topologyLabels))
    throw new ConfigError(`--node-topology-labels: "${topologyLabels}" must be on or off`);
  const budget = get('findings-call-budget') ?? '30';
  if (!/^\d+$/.test(budget) || Number(budget) < 1)
    throw new ConfigError(`--findings-call-budget: "${budget}" must be a whole number of calls per minute, 1 or more`);

  return {
    kind: 'run',
    config: {
      mode,
      ...(proxmoxEndpoint && { proxmoxEndpoint }),
      ...(nfsEndpoint && { nfsEndpoint }),
      ...(proxmox && { proxmox }),
      node: {
        nodeId,
        ...(region && { region }),
        ...(zone && { zone }),
        ...(Number(maxVolumes) > 0 && { maxVolumes: Number(maxVolumes) }),
      },
      deviceDir,
      kubeletDir,
      ...(nfsPort && { nfsPort }),
      ...(nfsMountPort && { nfsMountPort }),
      nfsDefaultOnDelete,
      ...(metricsAddress && { metricsAddress }),
      logLevel,
      nfsMountTimeoutMs: parseDuration(get('nfs-mount-timeout') ?? '2m', 'nfs-mount-timeout'),
      nfsCallTimeoutMs: parseDuration(get('nfs-call-timeout') ?? '10s', 'nfs-call-timeout'),
      drainTimeoutMs: parseDuration(get('drain-timeout') ?? '30s', 'drain-timeout'),
      poolGuard,
      nodeTopologyLabels: topologyLabels === 'on' || topologyLabels === 'true',
      findings: { intervalMs: findingsIntervalMs, callsPerMinute: Number(budget) },
    },
  };
}

/** --pool-guard, --pool-max-fill, --pool-max-overcommit (safety/pool-guard.ts has the meaning). */
function poolGuardOf(get: (name: Name) => string | undefined): AppConfig['poolGuard'] {
  const on = (get('pool-guard') ?? 'on').toLowerCase();
  if (!['on', 'off', 'true', 'false'].includes(on)) throw new ConfigError(`--pool-guard: "${on}" must be on or off`);
  const fill = get('pool-max-fill') ?? '90';
  const f = Number(fill);
  if (!/^\d+(\.\d+)?$/.test(fill) || f > 100)
    throw new ConfigError(`--pool-max-fill: "${fill}" must be a percentage from 0 (no limit) to 100`);
  const over = get('pool-max-overcommit') ?? '0';
  const o = Number(over);
  if (!/^\d+(\.\d+)?$/.test(over) || (o > 0 && o < 0.1))
    throw new ConfigError(`--pool-max-overcommit: "${over}" must be a ratio such as 1.5 or 3 (0 = no limit)`);
  return { enabled: on === 'on' || on === 'true', maxFill: f / 100, maxOvercommit: o };
}
