// The Proxmox controller backend (csi.proxmox.sinextra.dev): one Cluster per configured
// Proxmox cluster, keyed by region, and the RPC handlers bound to them.
import type { LocateVm } from './node-topology.js';
import type { Logger } from 'pino';
import type { ProxmoxClusterConfig, ProxmoxConfig } from '../../config/types.js';
import { bindHandlers } from '../../csi/bind.js';
import type { ControllerBackend, ControllerCapability } from '../../csi/types.js';
import { InvalidArgument } from '../../errors.js';
import { defined } from '../../defined.js';
import type { ProxmoxApi, ProxmoxReadApi } from '../api/api.js';
import { Cluster, type ClusterTuning } from './state/cluster.js';
import { controllerPublishVolume, controllerUnpublishVolume } from './rpc/attach.js';
import { controllerGetVolume, listVolumes } from './rpc/list.js';
import { createVolume, deleteVolume, getCapacity, validateVolumeCapabilities } from './rpc/volumes.js';
import type { Core } from './core.js';
import { controllerExpandVolume } from './rpc/expand.js';
import { createHttpProxmoxApi } from '../api/http-api.js';
import { type BackendHealth, HealthLog } from '../../csi/health.js';
import { controllerModifyVolume } from './rpc/modify.js';
import { createSnapshot, deleteSnapshot, listSnapshots } from './rpc/snapshot.js';
import { configuredHelpers, type HelperVmNames } from './safety/expansion-helpers.js';
import { DEFAULT_POOL_GUARD, type PoolGuardSettings } from './safety/pool-guard.js';
import { PoolUsage } from './state/pool-usage.js';
import type { Fences } from './safety/fences.js';

export { PROXMOX_DRIVER_NAME } from '../contract.js';

/**
 * Exactly what works; ControllerExpandVolume works online and offline (see expand.ts),
 * ControllerModifyVolume on attached and detached disks (see modify.ts).
 */
export const PROXMOX_CONTROLLER_CAPABILITIES: readonly ControllerCapability[] = [
  'CREATE_DELETE_VOLUME',
  'PUBLISH_UNPUBLISH_VOLUME',
  'PUBLISH_READONLY',
  'LIST_VOLUMES',
  'LIST_VOLUMES_PUBLISHED_NODES',
  'GET_CAPACITY',
  'EXPAND_VOLUME',
  'GET_VOLUME',
  'VOLUME_CONDITION',
  'SINGLE_NODE_MULTI_WRITER',
  'MODIFY_VOLUME',
];

/** With an API that can make thin copies (the HTTP adapter): snapshots, restores and clones too. */
const SNAPSHOT_CAPABILITIES: readonly ControllerCapability[] = [
  'CREATE_DELETE_SNAPSHOT',
  'LIST_SNAPSHOTS',
  'CLONE_VOLUME',
];

export interface ProxmoxControllerOptions {
  config: ProxmoxConfig;
  log: Logger;
  /** Builds one cluster's API; defaults to HTTPS through the proxmox-api package. */
  api?: (cluster: ProxmoxClusterConfig) => ProxmoxApi;
  /** Upper bound of one Proxmox HTTP exchange (default 30 s) and connections per host (default 8). */
  queryTimeoutMs?: number;
  connections?: number;
  tuning?: ClusterTuning;
  /** Kubernetes Node names (safety/expansion-helpers.ts), for clusters without an expansion_helpers list. */
  kubernetesNodes?: HelperVmNames;
  /** The thin-pool guard (safety/pool-guard.ts); default DEFAULT_POOL_GUARD. */
  poolGuard?: PoolGuardSettings;
}

export type ProxmoxController = ControllerBackend & {
  /** True when every configured Proxmox cluster answers; never throws. Backend health, not Probe. */
  probe(signal: AbortSignal): Promise<boolean>;
  /** Per cluster: does its API answer (GET /version). Transitions are logged. */
  health(signal: AbortSignal): Promise<BackendHealth[]>;
  /** Closes the HTTP connections. */
  close(): Promise<void>;
  /** What the pool and findings metrics read (pool-metrics.ts, src/metrics/). */
  inspect: ProxmoxInspect;
};

export interface ProxmoxInspect {
  controllerVmId: number;
  poolGuard: PoolGuardSettings;
  clusters: ReadonlyMap<
    string,
    {
      api: ProxmoxReadApi;
      fences: Fences;
      pools: PoolUsage;
      storages: Cluster['storages'];
      /** The VM a Kubernetes node id names (node-topology.ts). */
      locate: LocateVm;
    }
  >;
}

export function createProxmoxController(opts: ProxmoxControllerOptions): ProxmoxController {
  const { config, log } = opts;
  if (config.clusters.length === 0)
    throw new InvalidArgument('Proxmox config: clusters is empty; at least one cluster is required');
  const clusters = new Map<string, Cluster>();
  const closers: Array<() => Promise<void>> = [];
  for (const c of config.clusters) {
    if (clusters.has(c.region))
      throw new InvalidArgument(`Proxmox config: region "${c.region}" appears twice in clusters`);
    let api: ProxmoxApi;
    if (opts.api) {
      api = opts.api(c);
    } else {
      const http = createHttpProxmoxApi({
        cluster: c,
        queryTimeoutMs: opts.queryTimeoutMs,
        connections: opts.connections,
      });
      closers.push(() => http.close());
      api = http;
    }
    clusters.set(c.region, new Cluster(c.region, api, log, opts.tuning, c.username ?? c.tokenId));
  }
  const healthLog = new HealthLog(log);
  const helperVms = new Map<string, HelperVmNames>();
  for (const c of config.clusters) {
    const source = c.expansionHelpers ? configuredHelpers(c.expansionHelpers) : opts.kubernetesNodes;
    if (source) helperVms.set(c.region, source);
    else
      log.warn(
        { region: c.region },
        "no expansion_helpers and not in Kubernetes: an offline expansion may borrow any VM on the disk's host",
      );
  }
  const poolGuard = opts.poolGuard ?? DEFAULT_POOL_GUARD;
  const pools = new Map(
    [...clusters].map(([r, c]) => [r, new PoolUsage(r, c.api, c.content, config.controllerVmId, c.ttlMs)]),
  );
  const core: Core = {
    clusters,
    defaultRegion: defined(config.clusters[0], 'the first configured cluster').region,
    controllerVmId: config.controllerVmId,
    log,
    helperVms,
    poolGuard,
    pools,
  };
  const inspect = inspectOf(config.controllerVmId, poolGuard, clusters, pools);

  return {
    inspect,
    capabilities: [...clusters.values()].every((c) => c.port.canCopy())
      ? [...PROXMOX_CONTROLLER_CAPABILITIES, ...SNAPSHOT_CAPABILITIES]
      : PROXMOX_CONTROLLER_CAPABILITIES,
    ...bindHandlers(core, {
      createVolume,
      deleteVolume,
      validateVolumeCapabilities,
      controllerPublishVolume,
      controllerUnpublishVolume,
      listVolumes,
      getCapacity,
      controllerExpandVolume,
      controllerGetVolume,
      controllerModifyVolume,
      createSnapshot,
      deleteSnapshot,
      listSnapshots,
    }),
    async probe(signal) {
      const all = await this.health(signal);
      return all.every((h) => h.up);
    },
    async health(signal) {
      return healthLog.note(
        await Promise.all(
          [...clusters.values()].map(async (c) => {
            try {
              await c.api.version({ signal });
              return { kind: 'proxmox', backend: c.region, up: true };
            } catch (e) {
              return { kind: 'proxmox', backend: c.region, up: false, error: (e as Error).message };
            }
          }),
        ),
      );
    },
    async close() {
      await Promise.all(closers.map((f) => f()));
    },
  };
}

/** What the metrics and the Node topology labels read of the clusters (ProxmoxInspect). */
function inspectOf(
  controllerVmId: number,
  poolGuard: PoolGuardSettings,
  clusters: ReadonlyMap<string, Cluster>,
  pools: ReadonlyMap<string, PoolUsage>,
): ProxmoxInspect {
  return {
    controllerVmId,
    poolGuard,
    clusters: new Map(
      [...clusters].map(([r, c]) => [
        r,
        {
          api: c.api,
          fences: c.fences,
          pools: defined(pools.get(r), 'pool view'),
          storages: c.storages.bind(c),
          locate: (nodeId: string, signal?: AbortSignal) => c.locator.resolve(nodeId, signal),
        },
      ]),
    ),
  };
}
