// How csi.proxmox.sinextra.dev builds itself for the configured mode (src/csi/build.ts). Each
// half is imported only when served (dynamic import): a node plugin never loads the Proxmox API
// client. Module loading was most of the start time (bench/start.ts, bench/rss.ts).
import type { Logger } from 'pino';
import type { BuiltDriver, DriverBuilder } from '../csi/build.js';
import { driverOf } from '../csi/build.js';
import type { GaugeSource } from '../csi/gauges.js';
import { PROXMOX_DRIVER_NAME } from './contract.js';
import type { ProxmoxInspect } from './controller/controller.js';

export type { ProxmoxInspect };

type KubernetesNodeNames = typeof import('./controller/safety/expansion-helpers.js').kubernetesNodeNames;

export interface BuiltProxmox extends BuiltDriver {
  /** The controller's read surface for the findings metrics; only when it serves metrics. */
  inspect?: ProxmoxInspect;
}

export const proxmoxDriver: DriverBuilder<BuiltProxmox> = {
  name: PROXMOX_DRIVER_NAME,
  endpoint: (config) => config.proxmoxEndpoint,
  async build({ config, log, controller, node, exec }) {
    // load.ts guarantees the config file whenever a Proxmox controller runs.
    const c =
      controller && config.proxmox
        ? (await import('./controller/controller.js')).createProxmoxController({
            config: config.proxmox,
            log,
            poolGuard: config.poolGuard,
            ...(await withKubernetesNodes()),
          })
        : undefined;
    const n = node
      ? (await import('./node/node.js')).createProxmoxNode({
          nodeId: config.node.nodeId,
          ...(config.node.region && { region: config.node.region }),
          ...(config.node.zone && { zone: config.node.zone }),
          ...(config.node.maxVolumes && { maxVolumes: config.node.maxVolumes }),
          deviceDir: config.deviceDir,
          kubeletDir: config.kubeletDir,
          log,
          ...(exec && { exec }),
        })
      : undefined;
    const gauges: GaugeSource[] = [];
    const closers: (() => Promise<void>)[] = [];
    if (c) closers.push(() => c.close());
    if (c && config.nodeTopologyLabels) {
      const labels = await startNodeTopology(c.inspect, log);
      if (labels) closers.push(async () => labels.stop());
    }
    let inspect: ProxmoxInspect | undefined;
    if (c && config.metricsAddress) {
      const pool = (await import('./controller/pool-metrics.js')).poolMetrics(c.inspect, log);
      gauges.push(pool);
      closers.push(async () => pool.stop());
      inspect = c.inspect;
    }
    return {
      driver: driverOf(PROXMOX_DRIVER_NAME, true, c, n),
      gauges,
      close: async () => {
        await Promise.all(closers.map((f) => f()));
      },
      ...(inspect && { inspect }),
    };
  },
};

/** In a pod: the Kubernetes Node names limit offline-expansion helpers (controller/safety/expansion-helpers.ts). */
async function withKubernetesNodes(): Promise<{ kubernetesNodes?: NonNullable<ReturnType<KubernetesNodeNames>> }> {
  const k = (await import('./controller/safety/expansion-helpers.js')).kubernetesNodeNames();
  return k ? { kubernetesNodes: k } : {};
}

/** The Nodes' topology labels from where Proxmox runs their VMs; in a pod only (it patches Nodes). */
async function startNodeTopology(inspect: ProxmoxInspect, log: Logger): Promise<{ stop(): void } | undefined> {
  const kube = (await import('../k8s/in-cluster.js')).inClusterApi();
  if (!kube) {
    log.info('Node topology labels off: not running in Kubernetes');
    return undefined;
  }
  const { startNodeTopologyLabels } = await import('./controller/node-topology.js');
  const clusters = new Map([...inspect.clusters].map(([region, c]) => [region, c.locate]));
  return startNodeTopologyLabels({ kube, clusters, log });
}
