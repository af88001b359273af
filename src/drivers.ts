// Composes the two drivers from their backends for the configured mode: the controller half
// talks to Proxmox / the NFS server, the node half to this machine's kernel. Each half is imported
// only when the configuration serves it (dynamic import): a node plugin never loads the Proxmox
// API client, an NFS-only controller never loads the Proxmox code, and so on. Module loading
// was most of the start time and a good part of the idle memory (bench/start.ts, bench/rss.ts).
import type { Logger } from 'pino';
import type { AppConfig } from './config/types.js';
import type { ControllerBackend, Driver, NodeBackend } from './csi/types.js';
import type { BackendHealth } from './csi/health.js';
import type { GaugeSource } from './csi/gauges.js';
import type { ProxmoxInspect } from './proxmox/controller/controller.js';
import { PROXMOX_DRIVER_NAME } from './proxmox/contract.js';
import { NFS_DRIVER_NAME } from './nfs/contract.js';

type KubernetesNodeNames = typeof import('./proxmox/controller/safety/expansion-helpers.js').kubernetesNodeNames;

export const PROXMOX_DRIVER = PROXMOX_DRIVER_NAME;
export const NFS_DRIVER = NFS_DRIVER_NAME;

export interface Composed {
  drivers: { driver: Driver; endpoint: string }[];
  /** Gauges for /metrics (pool usage, day-2 findings, NFS volume usage); only when metrics are served. */
  gauges: GaugeSource[];
  close(): Promise<void>;
}

export async function buildDrivers(config: AppConfig, log: Logger): Promise<Composed> {
  const controller = config.mode !== 'node';
  const node = config.mode !== 'controller';
  const exec = node ? (await import('./os/index.js')).createExec() : undefined;
  const drivers: Composed['drivers'] = [];
  const closers: (() => Promise<void>)[] = [];
  const gauges: GaugeSource[] = [];
  let proxmoxInspect: ProxmoxInspect | undefined;

  if (config.proxmoxEndpoint) {
    const plog = log.child({ driver: PROXMOX_DRIVER });
    // load.ts guarantees the config file whenever a Proxmox controller runs.
    const c =
      controller && config.proxmox
        ? (await import('./proxmox/index.js')).createProxmoxController({
            config: config.proxmox,
            log: plog,
            poolGuard: config.poolGuard,
            ...(await withKubernetesNodes()),
          })
        : undefined;
    const n = node
      ? (await import('./proxmox/node/node.js')).createProxmoxNode({
          nodeId: config.node.nodeId,
          ...(config.node.region && { region: config.node.region }),
          ...(config.node.zone && { zone: config.node.zone }),
          ...(config.node.maxVolumes && { maxVolumes: config.node.maxVolumes }),
          deviceDir: config.deviceDir,
          kubeletDir: config.kubeletDir,
          log: plog,
          ...(exec && { exec }),
        })
      : undefined;
    if (c) closers.push(() => c.close());
    if (c && config.nodeTopologyLabels) {
      const labels = await startNodeTopology(c.inspect, plog);
      if (labels) closers.push(async () => labels.stop());
    }
    if (c && config.metricsAddress) {
      const pool = (await import('./proxmox/controller/pool-metrics.js')).poolMetrics(c.inspect, plog);
      gauges.push(pool);
      closers.push(async () => pool.stop());
      proxmoxInspect = c.inspect;
    }
    drivers.push({ endpoint: config.proxmoxEndpoint, driver: driverOf(PROXMOX_DRIVER, true, c, n) });
  }

  if (config.nfsEndpoint) {
    const nlog = log.child({ driver: NFS_DRIVER });
    const ports = {
      ...(config.nfsPort && { nfsPort: config.nfsPort }),
      ...(config.nfsMountPort && { mountPort: config.nfsMountPort }),
    };
    const copies =
      controller && config.metricsAddress
        ? new (await import('./nfs/controller/copy/copy-progress.js')).CopyProgress()
        : undefined;
    if (copies) gauges.push(copies);
    const c = controller
      ? (await import('./nfs/controller/controller.js')).createNfsController({
          log: nlog,
          callTimeoutMs: config.nfsCallTimeoutMs,
          defaultOnDelete: config.nfsDefaultOnDelete,
          ...ports,
          ...(copies && { copyProgress: copies }),
        })
      : undefined;
    if (c) closers.push(() => c.close());
    const usage =
      node && config.metricsAddress
        ? (await import('./nfs/node/usage.js')).createVolumeUsage({ log: nlog })
        : undefined;
    if (usage) gauges.push(usage);
    const n = node
      ? (await import('./nfs/node/node.js')).createNfsNode({
          nodeId: config.node.nodeId,
          log: nlog,
          mountTimeoutMs: config.nfsMountTimeoutMs,
          kubeletDir: config.kubeletDir,
          ...(config.nfsPort && { nfsPort: config.nfsPort }),
          ...(config.nfsMountPort && { nfsMountPort: config.nfsMountPort }),
          ...(exec && { exec }),
          ...(usage && { usage }),
        })
      : undefined;
    drivers.push({ endpoint: config.nfsEndpoint, driver: driverOf(NFS_DRIVER, false, c, n) });
  }
  if (controller && config.metricsAddress && config.findings.intervalMs > 0) {
    const f = await startFindings(config, log, proxmoxInspect);
    if (f) {
      gauges.push(f.metrics);
      closers.push(f.close);
    }
  }
  return {
    drivers,
    gauges,
    close: async () => {
      await Promise.all(closers.map((f) => f()));
    },
  };
}

/** A driver with whichever halves this process serves; both drivers expand online. */
function driverOf(
  name: string,
  accessibilityConstraints: boolean,
  controller: (ControllerBackend & { health(signal: AbortSignal): Promise<BackendHealth[]> }) | undefined,
  node: NodeBackend | undefined,
): Driver {
  return {
    name,
    accessibilityConstraints,
    onlineExpansion: true,
    // Probe: this process serves. Backend health goes to metrics and logs (health.ts).
    probe: async () => true,
    ...(controller && { controller, health: (signal: AbortSignal) => controller.health(signal) }),
    ...(node && { node }),
  };
}

/** In a pod: the Kubernetes Node names limit offline-expansion helpers (src/proxmox/controller/safety/expansion-helpers.ts). */
async function withKubernetesNodes(): Promise<{ kubernetesNodes?: NonNullable<ReturnType<KubernetesNodeNames>> }> {
  const k = (await import('./proxmox/controller/safety/expansion-helpers.js')).kubernetesNodeNames();
  return k ? { kubernetesNodes: k } : {};
}

/** The Nodes' topology labels from where Proxmox runs their VMs; in a pod only (it patches Nodes). */
async function startNodeTopology(inspect: ProxmoxInspect, log: Logger): Promise<{ stop(): void } | undefined> {
  const kube = (await import('./k8s/in-cluster.js')).inClusterApi();
  if (!kube) {
    log.info('Node topology labels off: not running in Kubernetes');
    return undefined;
  }
  const { startNodeTopologyLabels } = await import('./proxmox/controller/node-topology.js');
  const clusters = new Map([...inspect.clusters].map(([region, c]) => [region, c.locate]));
  return startNodeTopologyLabels({ kube, clusters, log });
}

/** The day-2 findings as metrics (src/metrics/findings.ts), in a pod only: they need the Kubernetes objects. */
async function startFindings(config: AppConfig, log: Logger, proxmox: ProxmoxInspect | undefined) {
  const kube = (await import('./metrics/findings-kube.js')).inClusterKubeFacts();
  if (!kube) {
    log.info('findings metrics off: not running in Kubernetes (they read its PVs and StorageClasses)');
    return undefined;
  }
  const stores = config.nfsEndpoint
    ? (await import('./nfs/controller/store/stores.js')).createNfsStores({
        timeoutMs: config.nfsCallTimeoutMs,
        privilegedPort: true,
        log: log.child({ driver: NFS_DRIVER }),
        ...(config.nfsPort && { nfsPort: config.nfsPort }),
        ...(config.nfsMountPort && { mountPort: config.nfsMountPort }),
      })
    : undefined;
  const metrics = (await import('./metrics/findings.js')).findingsMetrics({
    proxmox,
    kube,
    stores,
    log,
    intervalMs: config.findings.intervalMs,
    callsPerMinute: config.findings.callsPerMinute,
  });
  metrics.start();
  return {
    metrics,
    close: async () => {
      metrics.stop();
      await stores?.close();
    },
  };
}
