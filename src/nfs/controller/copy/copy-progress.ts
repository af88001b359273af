// The NFS copies running now (a snapshot being taken, a claim being restored or cloned), in the
// log and as gauges: an operator who sees a CreateSnapshot take minutes can tell how far it is
// and whether it moves. One series per running copy, gone when it ends, so the label set is
// bounded by the copies in flight. Values change when the copy reports progress (every few
// seconds, see copy-tree.ts) and when it ends.
import type { Logger } from 'pino';
import type { GaugeDef, GaugeSample, GaugeSource } from '../../../csi/gauges.js';
import type { CopyStats } from './copy-tree.js';

export type CopyKind = 'snapshot' | 'restore' | 'clone';

const L = ['server', 'kind', 'name'] as const;
const DEFS: readonly GaugeDef[] = [
  { name: 'pve_csi_nfs_copy_bytes', help: 'Bytes a running NFS copy has copied so far', labelNames: L },
  {
    name: 'pve_csi_nfs_copy_entries',
    help: 'Directories, files, links and special files a running NFS copy has made so far',
    labelNames: L,
  },
  {
    name: 'pve_csi_nfs_copy_server_side_files',
    help: 'Files of a running NFS copy the server cloned or copied itself (NFSv4.2 CLONE/COPY)',
    labelNames: L,
  },
  { name: 'pve_csi_nfs_copy_running_seconds', help: 'How long a running NFS copy has run', labelNames: L },
];

interface Running {
  labels: Record<(typeof L)[number], string>;
  stats: CopyStats | undefined;
  started: number;
}

export interface TrackedCopy {
  /** The copy's progress callback: a log line and the gauges. */
  readonly progress: (s: CopyStats) => void;
  /** The copy ended (done or failed): its series go. */
  readonly end: () => void;
}

export class CopyProgress implements GaugeSource {
  readonly defs = DEFS;
  private readonly running = new Set<Running>();

  constructor(private readonly now: () => number = Date.now) {}

  track(log: Logger, kind: CopyKind, server: string, name: string, what: Record<string, unknown>): TrackedCopy {
    const r: Running = { labels: { server, kind, name }, stats: undefined, started: this.now() };
    this.running.add(r);
    return {
      progress: (s) => {
        r.stats = { ...s };
        log.info({ ...what, ...s }, 'NFS copy progress');
      },
      end: () => void this.running.delete(r),
    };
  }

  snapshot(): readonly GaugeSample[] {
    const out: GaugeSample[] = [];
    const t = this.now();
    for (const r of this.running) {
      const s = r.stats;
      const entries = s ? s.dirs + s.files + s.symlinks + s.hardLinks + s.specials : 0;
      out.push(
        { name: 'pve_csi_nfs_copy_bytes', labels: r.labels, value: s?.bytes ?? 0 },
        { name: 'pve_csi_nfs_copy_entries', labels: r.labels, value: entries },
        { name: 'pve_csi_nfs_copy_server_side_files', labels: r.labels, value: s ? s.cloned + s.serverCopied : 0 },
        { name: 'pve_csi_nfs_copy_running_seconds', labels: r.labels, value: (t - r.started) / 1000 },
      );
    }
    return out;
  }
}

/** Runs `fn` as one tracked copy: progress goes to `log` and, when given, to the gauges. */
export async function trackedCopy<T>(
  copies: CopyProgress | undefined,
  log: Logger,
  id: { kind: CopyKind; server: string; name: string },
  what: Record<string, unknown>,
  fn: (progress: (s: CopyStats) => void) => Promise<T>,
): Promise<T> {
  const t = (copies ?? new CopyProgress()).track(log, id.kind, id.server, id.name, what);
  try {
    return await fn(t.progress);
  } finally {
    t.end();
  }
}
