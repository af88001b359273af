// Each storage's usage per host as gauges: size, data used, the virtual sizes of every thin
// volume and of this driver's, the over-commit ratio, what the thin-pool guard still allows, and
// the guard's limits (docs/operations.md). Refreshed in the background every `intervalMs` from
// the same pool view the guard reads (state/pool-usage.ts): per storage and host one status and
// one content list per refresh (fewer while the guard's own reads are fresh), plus the storage
// list of each cluster.
import type { Logger } from 'pino';
import type { GaugeDef, GaugeSample, GaugeSource } from '../../csi/gauges.js';
import { holdsImages, isAvailable } from './state/cluster.js';
import type { ProxmoxInspect } from './controller.js';
import { guardAllows, overcommitRatio } from './safety/pool-guard.js';
import { timeoutSignal } from '../../timeout-signal.js';

const L = ['region', 'node', 'storage'] as const;
export const POOL_GAUGES: readonly GaugeDef[] = [
  { name: 'pve_csi_pool_size_bytes', help: 'Size of a Proxmox storage (thin pool) on a host', labelNames: L },
  {
    name: 'pve_csi_pool_used_bytes',
    help: 'Data in the storage (for lvmthin the thin pool data usage: grows with writes, not with allocation)',
    labelNames: L,
  },
  {
    name: 'pve_csi_pool_provisioned_bytes',
    help: 'Sum of the sizes of the volumes on the storage: scope="driver" this driver\'s, scope="all" every volume listed',
    labelNames: [...L, 'scope'],
  },
  { name: 'pve_csi_pool_overcommit_ratio', help: 'Virtual sizes of every volume over the storage size', labelNames: L },
  {
    name: 'pve_csi_pool_guard_allows_bytes',
    help: 'What the thin-pool guard still allows on the storage (what GetCapacity reports)',
    labelNames: L,
  },
  {
    name: 'pve_csi_pool_guard_limit',
    help: 'The thin-pool guard limits: limit="fill" (share of the pool), limit="overcommit" (ratio); 0 = off',
    labelNames: ['limit'],
  },
  {
    name: 'pve_csi_pool_refresh_errors',
    help: 'Storages whose usage could not be read at the last refresh',
    labelNames: ['region'],
  },
];

export function poolMetrics(
  inspect: ProxmoxInspect,
  log: Logger,
  intervalMs = 60_000,
): GaugeSource & { refresh(): Promise<void>; stop(): void } {
  let samples: GaugeSample[] = [];
  const g = inspect.poolGuard;
  const limits = (): GaugeSample[] => [
    { name: 'pve_csi_pool_guard_limit', labels: { limit: 'fill' }, value: g.enabled ? g.maxFill : 0 },
    { name: 'pve_csi_pool_guard_limit', labels: { limit: 'overcommit' }, value: g.enabled ? g.maxOvercommit : 0 },
  ];
  const refresh = async () => {
    const deadline = timeoutSignal(60_000);
    try {
      samples = await read(deadline.signal);
    } finally {
      deadline.clear();
    }
  };
  const read = async (signal: AbortSignal): Promise<GaugeSample[]> => {
    const out = limits();
    for (const [region, c] of inspect.clusters) {
      let errors = 0;
      try {
        const rows = (await c.storages(signal)).filter((r) => holdsImages(r) && isAvailable(r));
        for (const r of rows) {
          try {
            const p = await c.pools.figures(r.node, r.storage, signal);
            const labels = { region, node: r.node, storage: r.storage };
            out.push(
              { name: 'pve_csi_pool_size_bytes', labels, value: p.size },
              { name: 'pve_csi_pool_used_bytes', labels, value: p.used },
              {
                name: 'pve_csi_pool_provisioned_bytes',
                labels: { ...labels, scope: 'driver' },
                value: p.provisionedOurs,
              },
              { name: 'pve_csi_pool_provisioned_bytes', labels: { ...labels, scope: 'all' }, value: p.provisionedAll },
              { name: 'pve_csi_pool_overcommit_ratio', labels, value: overcommitRatio(p) },
              { name: 'pve_csi_pool_guard_allows_bytes', labels, value: guardAllows(g, p) },
            );
          } catch (e) {
            errors++;
            log.debug({ err: (e as Error).message, node: r.node, storage: r.storage }, 'pool metrics: cannot read');
          }
        }
      } catch (e) {
        errors++;
        log.debug({ err: (e as Error).message, region }, 'pool metrics: cannot list storages');
      }
      out.push({ name: 'pve_csi_pool_refresh_errors', labels: { region }, value: errors });
    }
    return out;
  };
  const timer = setInterval(() => void refresh(), intervalMs);
  timer.unref();
  void refresh();
  return { defs: POOL_GAUGES, snapshot: () => samples, refresh, stop: () => clearInterval(timer) };
}
