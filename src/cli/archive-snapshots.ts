// The NFS snapshots `archives list` shows next to the archives, one row per snapshot directory of
// the scanned shares. Never pruned: a complete snapshot goes through DeleteSnapshot only, a
// partial one through `report --fix` (nfs-findings.ts); prune only says how many it left alone.
// csi-driver-nfs's own snapshot archives (<share>/<name>/<src>.tar.gz) are rows too (state
// csi-driver-nfs): this driver restores them, and only their DeleteSnapshot removes them.
import { formatAge, formatBytes, table } from './common.js';
import type { NfsFacts } from './report/facts.js';
import { sourceClaimOf } from './report/nfs-findings.js';

export interface SnapshotRow {
  server: string;
  share: string;
  name: string;
  path: string;
  /** The claim it was taken of (its source handle's subDir, upstream's archive name); unknown for a partial one. */
  source?: string;
  state: 'complete' | 'partial' | 'csi-driver-nfs';
  /** Complete: its creation time; partial: the latest change below it. */
  at: number;
  sizeBytes?: number;
}

export function snapshotRows(
  n: Pick<NfsFacts, 'snapshots'> & Partial<Pick<NfsFacts, 'upstreamSnapshots'>>,
): SnapshotRow[] {
  const ours = n.snapshots.map((s): SnapshotRow => ({
    server: s.server,
    share: s.share,
    name: s.name,
    path: s.dir,
    state: s.complete ? 'complete' : 'partial',
    at: s.complete?.createdMs ?? s.changedAt ?? 0,
    ...(s.complete && { source: sourceClaimOf(s.complete.sourceVolumeId) }),
    ...((s.complete?.sizeBytes ?? s.sizeBytes) !== undefined && { sizeBytes: s.complete?.sizeBytes ?? s.sizeBytes }),
  }));
  const upstream = (n.upstreamSnapshots ?? []).map((s): SnapshotRow => {
    const sizes = s.archives.flatMap((a) => (a.sizeBytes === undefined ? [] : [a.sizeBytes]));
    return {
      server: s.server,
      share: s.share,
      name: s.name,
      path: `${s.name}/${s.archives.map((a) => a.name).join(' + ')}`,
      source: s.src,
      state: 'csi-driver-nfs',
      at: Math.max(0, ...s.archives.map((a) => a.mtimeMs ?? 0)),
      ...(sizes.length > 0 && { sizeBytes: sizes.reduce((a, b) => a + b, 0) }),
    };
  });
  return [...ours, ...upstream];
}

export function formatSnapshots(
  rows: readonly SnapshotRow[],
  now: number,
  mode: 'list' | 'dry-run' | 'pruned',
): string {
  if (rows.length === 0) return '';
  const partial = rows.filter((r) => r.state === 'partial').length;
  if (mode !== 'list')
    return `${rows.length} snapshot(s) left alone: prune never removes snapshots (DeleteSnapshot does${partial ? `; report --fix removes the ${partial} partial one(s) past its grace period` : ''})\n`;
  const out = table(
    ['SHARE', 'SNAPSHOT', 'OF', 'STATE', 'AGE', 'SIZE'],
    rows.map((r) => [
      `${r.server}:${r.share}`,
      r.name,
      r.source ?? '?',
      r.state,
      r.at ? formatAge(now - r.at) : '?',
      formatBytes(r.sizeBytes),
    ]),
  );
  const total = rows.reduce((a, r) => a + (r.sizeBytes ?? 0), 0);
  return `\n${out}\n${rows.length} snapshot(s), ${formatBytes(total)}${partial ? `; ${partial} partial (a copy that did not finish: report --fix removes it past its grace period)` : ''}\n`;
}
