// Where the RPC handlers ask the thin-pool guard (safety/pool-guard.ts): CreateVolume before it
// allocates, ControllerExpandVolume before it grows, GetCapacity for what it reports. Each is a
// no-op when the guard is off or the Core has no pool view (a Core built by `report --fix`).
import type { Core } from '../core.js';
import type { Cluster } from '../state/cluster.js';
import { guardAllows, guardDecide, type GuardDecision } from '../safety/pool-guard.js';
import { ResourceExhausted } from '../../../errors.js';

function guardOf(core: Core, cluster: Cluster) {
  const settings = core.poolGuard;
  const pools = core.pools?.get(cluster.region);
  return settings?.enabled && pools ? { settings, pools } : undefined;
}

/**
 * The host a new volume of `size` bytes goes to: the first of `zones` the guard allows, with the
 * size reserved until `release` (call it when the allocation ended, whatever its outcome). When
 * the first host is refused, `existsOnFirst` says whether the disk is already there (a retry
 * whose answer was lost): then it stays there, the guard does not apply to a volume that exists,
 * and no second disk is made elsewhere. None allowed: RESOURCE_EXHAUSTED with the first refusal.
 */
export async function guardPlacement(
  core: Core,
  cluster: Cluster,
  zones: readonly [string, ...string[]],
  storage: string,
  size: number,
  what: string,
  signal: AbortSignal,
  existsOnFirst: () => Promise<boolean>,
): Promise<{ zone: string; release: () => void }> {
  const g = guardOf(core, cluster);
  if (!g) return { zone: zones[0], release: () => undefined };
  let first: GuardDecision | undefined;
  for (const zone of zones) {
    // The fill is read now: guests write into a pool far faster than any cache TTL, and a create
    // judged against a fill read before them over-fills it (the one failure the guard exists for).
    const d = guardDecide(g.settings, await g.pools.figures(zone, storage, signal, 'status'), size, what);
    if (d.ok) return { zone, release: g.pools.reserve(zone, storage, size) };
    first ??= d;
    if (zone === zones[0] && (await existsOnFirst())) return { zone, release: () => undefined };
  }
  if (first && !first.ok) throw new ResourceExhausted(first.message);
  return { zone: zones[0], release: () => undefined };
}

/** Refuses (RESOURCE_EXHAUSTED) a growth of `bytes` that the guard does not allow. */
export async function guardGrowth(
  core: Core,
  cluster: Cluster,
  node: string,
  storage: string,
  bytes: number,
  what: string,
  signal: AbortSignal,
): Promise<void> {
  const g = guardOf(core, cluster);
  if (!g || bytes <= 0) return;
  const d = guardDecide(g.settings, await g.pools.figures(node, storage, signal, true), bytes, what);
  if (!d.ok) throw new ResourceExhausted(d.message);
}

/**
 * What GetCapacity reports for one host's storage: what Proxmox reports free (`st`, read by the
 * caller just now), capped by what the guard would still allow.
 */
export async function guardedCapacity(
  core: Core,
  cluster: Cluster,
  node: string,
  storage: string,
  st: { total: number; used: number; avail: number; active: boolean },
  signal: AbortSignal,
): Promise<number> {
  const avail = st.active ? Math.max(0, st.avail) : 0;
  const g = guardOf(core, cluster);
  if (!g || avail === 0) return avail;
  return Math.min(avail, guardAllows(g.settings, await g.pools.figures(node, storage, signal, false, st)));
}
