// The day-2 findings of `pve-nfs-csi report` as controller gauges: one implementation, two
// outputs. The facts are gathered and judged by the report's own functions (cli/report/facts.ts,
// findings.ts, nfs-findings.ts); this file only counts them by kind and place, and keeps the cost bounded:
//   - refreshed in the background, every `intervalMs` at most;
//   - never more Proxmox calls in any minute than `callsPerMinute`: every call of a refresh is
//     counted, and the next refresh waits until the calls of the last minute plus one more
//     refresh like the last fit the budget (nextDelayMs). One refresh costs, per
//     cluster, 1 storage list + 1 content list per storage and host + 1 VM list + 1 config read
//     per VM (the report's scan), so a homelab of 3 hosts and 10 VMs spends ~15 calls;
//   - the Kubernetes lists (PVs, claims, VolumeAttachments, StorageClasses) and the NFS walks
//     of the shares (archive sizes included, the report's default) are not Proxmox calls.
// Scrapes read the last snapshot and make no call.
import type { Logger } from 'pino';
import type { GaugeDef, GaugeSample, GaugeSource } from '../csi/gauges.js';
import type { KubeFacts, NfsFacts } from '../cli/report/facts.js';
import type { Finding } from '../cli/report/findings.js';
import type { ProxmoxInspect } from '../proxmox/controller/controller.js';
import type { NfsStores } from '../nfs/controller/store/store.js';

const FL = ['kind', 'where'] as const;
export const FINDINGS_GAUGES: readonly GaugeDef[] = [
  {
    name: 'pve_csi_findings',
    help: 'Findings of `pve-nfs-csi report` by kind (orphan-disk, pending-delete, unused-entry, helper-attachment, orphan-dir, archive, …) and place',
    labelNames: FL,
  },
  {
    name: 'pve_csi_findings_bytes',
    help: 'Sizes of the findings that have one (orphaned disks, archives)',
    labelNames: FL,
  },
  {
    name: 'pve_csi_findings_oldest_age_seconds',
    help: 'Age of the oldest finding of a kind and place',
    labelNames: FL,
  },
  {
    name: 'pve_csi_nfs_archives',
    help: 'Archived claim directories on the share of an NFS StorageClass',
    labelNames: ['storageclass', 'where'],
  },
  { name: 'pve_csi_nfs_archive_bytes', help: 'Bytes of those archives', labelNames: ['storageclass', 'where'] },
  {
    name: 'pve_csi_nfs_archive_oldest_age_seconds',
    help: 'Age of the oldest archive on the share of an NFS StorageClass',
    labelNames: ['storageclass', 'where'],
  },
  {
    name: 'pve_csi_fences',
    help: 'Volumes fenced by a Proxmox change that may still land, by kind',
    labelNames: ['region', 'kind'],
  },
  {
    name: 'pve_csi_fence_oldest_age_seconds',
    help: 'Age of the oldest fence (a stuck one grows)',
    labelNames: ['region'],
  },
  {
    name: 'pve_csi_findings_up',
    help: '1 when the last findings refresh read everything, 0 when part of it failed',
    labelNames: [],
  },
  { name: 'pve_csi_findings_refresh_timestamp_seconds', help: 'When the findings were last refreshed', labelNames: [] },
  {
    name: 'pve_csi_findings_refresh_seconds',
    help: 'How long the last findings refresh took, failed or not',
    labelNames: [],
  },
  {
    name: 'pve_csi_findings_refresh_failures',
    help: 'Findings refreshes that failed since the controller started (each is also a log line)',
    labelNames: [],
  },
  { name: 'pve_csi_findings_proxmox_calls', help: 'Proxmox calls the last findings refresh made', labelNames: [] },
  {
    name: 'pve_csi_findings_call_budget',
    help: 'Proxmox calls per minute the findings may make at most',
    labelNames: [],
  },
];

/** Counts, sizes and oldest ages of findings by kind and place, as gauges. */
export function findingSamples(findings: readonly Finding[]): GaugeSample[] {
  const by = new Map<string, { kind: string; where: string; n: number; bytes: number; age: number; sized: boolean }>();
  for (const f of findings) {
    const k = `${f.kind}\u0000${f.where}`;
    const e = by.get(k) ?? { kind: f.kind, where: f.where, n: 0, bytes: 0, age: 0, sized: false };
    e.n++;
    if (f.sizeBytes !== undefined) {
      e.bytes += f.sizeBytes;
      e.sized = true;
    }
    if (f.ageMs !== undefined) e.age = Math.max(e.age, f.ageMs / 1000);
    by.set(k, e);
  }
  return [...by.values()].flatMap((e) => {
    const labels = { kind: e.kind, where: e.where };
    return [
      { name: 'pve_csi_findings', labels, value: e.n },
      { name: 'pve_csi_findings_oldest_age_seconds', labels, value: e.age },
      ...(e.sized ? [{ name: 'pve_csi_findings_bytes', labels, value: e.bytes }] : []),
    ];
  });
}

/** Archives per StorageClass: every class sees the archives found on its share. */
export function archiveSamples(nfs: NfsFacts | undefined, now: number): GaugeSample[] {
  return (nfs?.classes ?? []).flatMap((c) => {
    const labels = { storageclass: c.name, where: `${c.server}:${c.share}` };
    const archives = (nfs?.archives ?? []).filter((a) => a.server === c.server && a.share === c.share);
    const oldest = Math.max(0, ...archives.map((a) => (now - a.archivedAt) / 1000));
    return [
      { name: 'pve_csi_nfs_archives', labels, value: archives.length },
      { name: 'pve_csi_nfs_archive_bytes', labels, value: archives.reduce((n, a) => n + (a.sizeBytes ?? 0), 0) },
      { name: 'pve_csi_nfs_archive_oldest_age_seconds', labels, value: oldest },
    ];
  });
}

export interface FindingsOptions {
  proxmox?: ProxmoxInspect | undefined;
  /** The Kubernetes objects the report reads (in a pod: in-cluster GETs, findings-kube.ts). */
  kube: (signal: AbortSignal) => Promise<KubeFacts>;
  /** NFS stores for the shares' walks; absent: no NFS findings. */
  stores?: NfsStores | undefined;
  log: Logger;
  intervalMs: number;
  callsPerMinute: number;
  /** Leftovers younger than this are not counted as removable; as `report --grace` (default 1h). */
  graceMs?: number;
  now?: () => number;
}

export interface FindingsMetrics extends GaugeSource {
  /** One refresh now; resolves with the Proxmox calls it made. */
  refresh(): Promise<number>;
  /** Starts the background loop (refresh, then wait for the interval and the budget). */
  start(): void;
  stop(): void;
}

export function findingsMetrics(o: FindingsOptions): FindingsMetrics {
  let samples: GaugeSample[] = [];
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let failures = 0;
  const now = o.now ?? Date.now;
  const own = (up: number, seconds: number, calls: number): GaugeSample[] => [
    { name: 'pve_csi_findings_up', labels: {}, value: up },
    { name: 'pve_csi_findings_refresh_timestamp_seconds', labels: {}, value: Math.floor(now() / 1000) },
    { name: 'pve_csi_findings_refresh_seconds', labels: {}, value: seconds },
    { name: 'pve_csi_findings_refresh_failures', labels: {}, value: failures },
    { name: 'pve_csi_findings_proxmox_calls', labels: {}, value: calls },
    { name: 'pve_csi_findings_call_budget', labels: {}, value: o.callsPerMinute },
  ];
  const refresh = async (): Promise<number> => {
    const { collect } = await import('./findings-collect.js');
    let calls = 0;
    const t0 = performance.now();
    const r = await collect({ ...o, now: now(), count: () => calls++ });
    samples = [
      ...findingSamples(r.findings),
      ...archiveSamples(r.nfs, now()),
      ...r.fences,
      ...own(r.complete ? 1 : 0, (performance.now() - t0) / 1000, calls),
    ];
    return calls;
  };
  const history: Array<{ at: number; calls: number }> = [];
  const loop = async () => {
    let calls = 0;
    const t0 = performance.now();
    try {
      calls = await refresh();
    } catch (e) {
      // A refresh that fails is a gauge and a log line; the last findings stay, marked not up.
      failures++;
      const mine = new Set(own(0, 0, 0).map((x) => x.name));
      const kept = samples.filter((x) => !mine.has(x.name));
      samples = [...kept, ...own(0, (performance.now() - t0) / 1000, calls)];
      o.log.warn({ err: (e as Error).message, failures }, 'findings metrics: refresh failed');
    }
    if (stopped) return;
    const at = now();
    history.push({ at, calls });
    while ((history[0]?.at ?? at) <= at - 60_000) history.shift();
    timer = setTimeout(() => void loop(), nextDelayMs(history, calls, o.intervalMs, o.callsPerMinute, at));
    timer.unref();
  };
  return {
    defs: FINDINGS_GAUGES,
    snapshot: () => samples,
    refresh,
    start: () => void loop(),
    stop: () => {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}

/**
 * The pause after a refresh: at least the interval; and long enough that the calls made in the
 * last minute (`history`: when each refresh ended, and its calls) plus another refresh like the
 * last one (`next` calls) stay within the budget for any minute. A refresh that alone costs more
 * than the budget is followed by a pause of next / budget minutes, so the average still holds.
 */
export function nextDelayMs(
  history: ReadonlyArray<{ at: number; calls: number }>,
  next: number,
  intervalMs: number,
  callsPerMinute: number,
  now: number,
): number {
  const recent = history.filter((h) => h.at > now - 60_000).sort((a, b) => a.at - b.at);
  let inWindow = recent.reduce((n, h) => n + h.calls, 0);
  let until = now;
  for (const h of recent) {
    if (inWindow + next <= callsPerMinute) break;
    inWindow -= h.calls;
    until = h.at + 60_000;
  }
  return Math.max(intervalMs, until - now, Math.ceil((next / callsPerMinute) * 60_000));
}
