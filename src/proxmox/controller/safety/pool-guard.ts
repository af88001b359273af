// The thin-pool guard: an LVM-thin pool that fills up turns every thin volume on its host (every
// VM's disk, not only ours) into I/O errors, and over-commit makes that more likely. Pure: from a
// pool's figures (Proxmox's storage status and content list, read by state/pool-usage.ts) and the
// settings, whether a new volume or a growth of `bytes` is allowed, and how much the guard would
// still allow (what GetCapacity reports, so CSIStorageCapacity steers claims to hosts with room).
//
// A thin volume costs nothing when it is created; it fills the pool as it is written. So both
// limits look at the worst case, the volume written full:
//   - fill: used + bytes must stay within maxFill × size (`used` is the pool's data usage, which
//     grows with what every thin volume wrote: pve-storage's LvmThinPlugin status());
//   - over-commit: (the virtual sizes of every thin volume on the storage + bytes) / size must
//     stay within maxOvercommit.
import { ResourceExhausted } from '../../../errors.js';

export interface PoolGuardSettings {
  enabled: boolean;
  /** Fraction of the pool (0 < x ≤ 1) that data may fill; 0 turns this limit off. */
  maxFill: number;
  /** Virtual sizes over pool size (e.g. 2 = twice the pool); 0 turns this limit off. */
  maxOvercommit: number;
}

/** On by default: refuse what could push a pool past 90 % full; no over-commit limit (see docs/operations.md). */
export const DEFAULT_POOL_GUARD: PoolGuardSettings = { enabled: true, maxFill: 0.9, maxOvercommit: 0 };

/** Where the settings come from, for messages a person can act on. */
export const GUARD_SETTING = {
  maxFill: 'proxmox.poolGuard.maxFillPercent (flag --pool-max-fill)',
  maxOvercommit: 'proxmox.poolGuard.maxOvercommit (flag --pool-max-overcommit)',
  enabled: 'proxmox.poolGuard.enabled (flag --pool-guard)',
} as const;

export interface PoolFigures {
  region: string;
  node: string;
  storage: string;
  /** Pool size (Proxmox `total`). */
  size: number;
  /** Data in the pool (Proxmox `used`). */
  used: number;
  /** Sum of the virtual sizes of every thin volume on the storage that the listing shows. */
  provisionedAll: number;
  /** Sum of the sizes of this driver's volumes. */
  provisionedOurs: number;
}

export type GuardDecision = { ok: true } | { ok: false; limit: 'maxFill' | 'maxOvercommit'; message: string };

const GiB = 1024 ** 3;
const gib = (n: number) => `${(n / GiB).toFixed(1)} GiB`;
const pct = (n: number) => `${(n * 100).toFixed(1)} %`;

/** used / size, 0 for a pool without a size. */
export const fillRatio = (p: PoolFigures): number => (p.size > 0 ? p.used / p.size : 0);
/** Virtual sizes / size, 0 for a pool without a size. */
export const overcommitRatio = (p: PoolFigures): number => (p.size > 0 ? p.provisionedAll / p.size : 0);

/** Bytes the guard would still allow for one volume (or one growth) on this pool. */
export function guardAllows(s: PoolGuardSettings, p: PoolFigures): number {
  // Off, or no limit set: what Proxmox reports free.
  if (!s.enabled || (s.maxFill <= 0 && s.maxOvercommit <= 0)) return Math.max(0, p.size - p.used);
  let room = Number.MAX_SAFE_INTEGER;
  if (s.maxFill > 0) room = Math.min(room, Math.floor(s.maxFill * p.size) - p.used);
  if (s.maxOvercommit > 0) room = Math.min(room, Math.floor(s.maxOvercommit * p.size) - p.provisionedAll);
  return Math.max(0, room);
}

/** Whether `bytes` more (a new volume's size, or an expansion's growth) may go on this pool. */
export function guardDecide(s: PoolGuardSettings, p: PoolFigures, bytes: number, what: string): GuardDecision {
  if (!s.enabled || bytes <= 0) return { ok: true };
  const at = `storage ${p.storage} on host ${p.node} (cluster ${p.region})`;
  if (s.maxFill > 0 && p.used + bytes > s.maxFill * p.size) {
    return {
      ok: false,
      limit: 'maxFill',
      message:
        `${what} refused by the thin-pool guard: ${at} has ${gib(p.used)} of ${gib(p.size)} written (${pct(fillRatio(p))}); ` +
        `${gib(bytes)} more, once written, would fill it past ${pct(s.maxFill)} (${GUARD_SETTING.maxFill}); ` +
        `the guard allows ${gib(guardAllows(s, p))} here. Free space in the pool, use another host, or raise the setting`,
    };
  }
  if (s.maxOvercommit > 0 && p.provisionedAll + bytes > s.maxOvercommit * p.size) {
    return {
      ok: false,
      limit: 'maxOvercommit',
      message:
        `${what} refused by the thin-pool guard: ${at} holds thin volumes of ${gib(p.provisionedAll)} in total ` +
        `(${gib(p.provisionedOurs)} of them this driver's) on a pool of ${gib(p.size)} (over-commit ${overcommitRatio(p).toFixed(2)}); ` +
        `${gib(bytes)} more would pass the limit of ${s.maxOvercommit} (${GUARD_SETTING.maxOvercommit}); ` +
        `the guard allows ${gib(guardAllows(s, p))} here. Delete unused volumes, use another host, or raise the setting`,
    };
  }
  return { ok: true };
}

/** guardDecide, throwing RESOURCE_EXHAUSTED with its message when refused. */
export function guardCheck(s: PoolGuardSettings, p: PoolFigures, bytes: number, what: string): void {
  const d = guardDecide(s, p, bytes, what);
  if (!d.ok) throw new ResourceExhausted(d.message);
}
