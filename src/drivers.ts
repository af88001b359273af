// Composes the two drivers from their backends for the configured mode: the controller half
// talks to Proxmox / the NFS server, the node half to this machine's kernel. Each half is imported
// only when the configuration serves it (dynamic import): a node plugin never loads the Proxmox
// API client, an NFS-only controller never loads the Proxmox code, and so on. Module loading
// was most of the start time and a good part of the idle memory (bench/start.ts, bench/rss.ts).
import type { Logger } from 'pino';
import type { AppConfig } from './config/types.js';
import type { Driver } from './csi/types.js';
import type { GaugeSource } from './csi/gauges.js';
import type { DriverBuilder } from './csi/build.js';
import { type BuiltProxmox, proxmoxDriver, type ProxmoxInspect } from './proxmox/driver.js';
import { NFS_DRIVER_NAME, findingsStores, nfsDriver } from './nfs/driver.js';

/**
 * Every driver this program serves, in the order their servers start; each builds itself. What
 * a driver builds may carry the Proxmox controller's read surface for the findings metrics (an
 * optional field, so the NFS driver's answer fits the same type).
 */
const DRIVERS: readonly DriverBuilder<BuiltProxmox>[] = [proxmoxDriver, nfsDriver];

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

  for (const d of DRIVERS) {
    const endpoint = d.endpoint(config);
    if (!endpoint) continue;
    const built = await d.build({ config, log: log.child({ driver: d.name }), controller, node, exec });
    drivers.push({ endpoint, driver: built.driver });
    gauges.push(...built.gauges);
    closers.push(() => built.close());
    if (built.inspect) proxmoxInspect = built.inspect;
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

/** The day-2 findings as metrics (src/metrics/findings.ts), in a pod only: they need the Kubernetes objects. */
async function startFindings(config: AppConfig, log: Logger, proxmox: ProxmoxInspect | undefined) {
  const kube = (await import('./metrics/findings-kube.js')).inClusterKubeFacts();
  if (!kube) {
    log.info('findings metrics off: not running in Kubernetes (they read its PVs and StorageClasses)');
    return undefined;
  }
  const stores = config.nfsEndpoint ? await findingsStores(config, log.child({ driver: NFS_DRIVER })) : undefined;
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
