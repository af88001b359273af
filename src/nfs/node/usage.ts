// What each NFS volume mounted on this node holds, against which its claim's size is a soft quota:
// an export cannot enforce a per-directory size, and statfs of the mount (what NodeGetVolumeStats
// answers, as csi-driver-nfs does) is the whole share's file system, not the claim's directory.
// So the node measures the directory itself, as du does: the allocated bytes of everything under
// the mount, hard links once, never crossing into another file system mounted inside it.
//
// Cost is bounded: a volume is measured when kubelet asks for its stats (every minute by default)
// and at most once per `minIntervalMs`; one walk runs at a time on the node, off the RPC path (the
// stats answer never waits for it); a walk stops after `maxEntries` entries (the value is then a
// lower bound, and says so in pve_csi_nfs_volume_usage_complete). A volume kubelet stopped asking
// about (unpublished) is dropped after `staleMs`. Scrapes read the last values and do no I/O.
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { GaugeDef, GaugeSample, GaugeSource } from '../../csi/gauges.js';

const VL = ['persistentvolume', 'volume_id'] as const;
export const NFS_USAGE_GAUGES: readonly GaugeDef[] = [
  {
    name: 'pve_csi_nfs_volume_used_bytes',
    help: "Bytes an NFS volume's directory holds, measured from this node's mount (its claim's size is a soft quota)",
    labelNames: VL,
  },
  {
    name: 'pve_csi_nfs_volume_usage_complete',
    help: '1 when the last measurement walked the whole directory, 0 when it stopped at its entry limit (a lower bound)',
    labelNames: VL,
  },
  {
    name: 'pve_csi_nfs_volume_usage_timestamp_seconds',
    help: 'When the NFS volume was last measured',
    labelNames: VL,
  },
];

export interface Walked {
  bytes: number;
  entries: number;
  complete: boolean;
}

/** du of `root`: allocated bytes of every entry under it on its own file system, hard links once. */
export async function measureDir(root: string, maxEntries: number): Promise<Walked> {
  const dev = (await fs.lstat(root)).dev;
  const seen = new Set<number>();
  let bytes = 0;
  let entries = 0;
  const dirs = [root];
  for (let dir = dirs.pop(); dir !== undefined; dir = dirs.pop()) {
    let names: string[];
    try {
      names = await fs.readdir(dir);
    } catch {
      continue; // removed meanwhile, or not readable: what can be read still counts
    }
    for (const name of names) {
      if (entries >= maxEntries) return { bytes, entries, complete: false };
      entries++;
      const p = path.join(dir, name);
      const st = await fs.lstat(p).catch(() => undefined);
      if (!st || st.dev !== dev) continue;
      if (st.nlink > 1 && !st.isDirectory()) {
        if (seen.has(st.ino)) continue;
        seen.add(st.ino);
      }
      bytes += st.blocks * 512;
      if (st.isDirectory()) dirs.push(p);
    }
  }
  return { bytes, entries, complete: true };
}

/** The PV a kubelet publish path belongs to: …/volumes/kubernetes.io~csi/<pv>/mount. */
export function pvOfPath(volumePath: string): string {
  return /\/volumes\/kubernetes\.io~csi\/([^/]+)\/mount\/?$/.exec(volumePath)?.[1] ?? '';
}

export interface VolumeUsageOptions {
  log: Logger;
  /** Entries one walk reads at most (default 200,000). */
  maxEntries?: number;
  /** A volume is measured at most this often (default 5 minutes). */
  minIntervalMs?: number;
  /** A volume not asked about for this long is dropped (default 15 minutes). */
  staleMs?: number;
  now?: () => number;
  measure?: (dir: string, maxEntries: number) => Promise<Walked>;
}

export interface VolumeUsage extends GaugeSource {
  /** kubelet asked for the stats of `volumeId` at `volumePath`: measure it if its value is old. */
  observe(volumeId: string, volumePath: string): void;
  /** Resolves when the walks queued so far are done (tests, shutdown). */
  idle(): Promise<void>;
}

interface Entry {
  pv: string;
  path: string;
  seenAt: number;
  measuredAt: number;
  walked?: Walked;
  queued: boolean;
}

export function createVolumeUsage(o: VolumeUsageOptions): VolumeUsage {
  const now = o.now ?? Date.now;
  const measure = o.measure ?? measureDir;
  const maxEntries = o.maxEntries ?? 200_000;
  const minIntervalMs = o.minIntervalMs ?? 5 * 60_000;
  const staleMs = o.staleMs ?? 15 * 60_000;
  const volumes = new Map<string, Entry>();
  let chain: Promise<void> = Promise.resolve();

  const walk = async (volumeId: string, e: Entry) => {
    try {
      const t0 = now();
      e.walked = await measure(e.path, maxEntries);
      e.measuredAt = now();
      o.log.debug({ volumeId, path: e.path, ...e.walked, ms: e.measuredAt - t0 }, 'NFS volume usage measured');
    } catch (err) {
      o.log.warn({ volumeId, path: e.path, err: (err as Error).message }, 'NFS volume usage: cannot measure');
    } finally {
      e.queued = false;
    }
  };

  return {
    defs: NFS_USAGE_GAUGES,
    observe(volumeId, volumePath) {
      const at = now();
      const e = volumes.get(volumeId) ?? {
        pv: pvOfPath(volumePath),
        path: volumePath,
        seenAt: at,
        measuredAt: 0,
        queued: false,
      };
      Object.assign(e, { seenAt: at, path: volumePath });
      volumes.set(volumeId, e);
      if (e.queued || (e.walked && at - e.measuredAt < minIntervalMs)) return;
      e.queued = true;
      chain = chain.then(() => walk(volumeId, e));
    },
    idle: () => chain,
    snapshot() {
      const at = now();
      const out: GaugeSample[] = [];
      for (const [volumeId, e] of volumes) {
        if (at - e.seenAt > staleMs) {
          if (!e.queued) volumes.delete(volumeId);
          continue;
        }
        if (!e.walked) continue;
        const labels = { persistentvolume: e.pv, volume_id: volumeId };
        out.push(
          { name: 'pve_csi_nfs_volume_used_bytes', labels, value: e.walked.bytes },
          { name: 'pve_csi_nfs_volume_usage_complete', labels, value: e.walked.complete ? 1 : 0 },
          { name: 'pve_csi_nfs_volume_usage_timestamp_seconds', labels, value: Math.floor(e.measuredAt / 1000) },
        );
      }
      return out;
    },
  };
}
