// `pve-nfs-csi archives list|prune`: retention for the directories the NFS archive policy leaves
// (archived-<subDir>, nfs/controller/archives.ts). Which shares and how deep their claims sit
// come from the NFS StorageClasses; age from the archive's own name, else from its directory's
// times. prune removes only archives older than --older-than, re-checks each right before
// removing it (still an archive path, still old enough, no PV points into or above it: a static
// PV may have been made to recover data from one), and never touches anything outside an
// `archived-*` tree: a live claim directory cannot be reached. NFS snapshots are listed beside
// them and never pruned (archive-snapshots.ts). Conventions: common.ts.
import { destination, pino } from 'pino';
import type { KubeApi } from '../k8s/index.js';
import { isArchivePath, archiveStampOf, type Archive } from '../nfs/controller/archives.js';
import { deleteVolumeDir } from '../nfs/controller/rpc/policy.js';
import type { NfsStore } from '../nfs/controller/store/store.js';
import { createNfsStores } from '../nfs/controller/store/stores.js';
import {
  COMMON_FLAGS_HELP,
  EXIT,
  EXIT_CODES_HELP,
  formatAge,
  formatBytes,
  parseAge,
  parseFlags,
  parsePort,
  runCommand,
  table,
  UsageError,
  type Io,
} from './common.js';
import type { Subcommand } from './subcommand.js';
import { nfsClasses, readNfs, type NfsFacts } from './report/facts.js';
import { archiveVerdicts, nfsView } from './report/nfs-findings.js';
import { formatSnapshots, snapshotRows } from './archive-snapshots.js';
import { absolute, judgeArchive } from './report/ownership.js';
import { kubeFrom } from './sources.js';

const USAGE = `Usage: pve-nfs-csi archives list [--older-than DUR] [flags]
       pve-nfs-csi archives prune --older-than DUR [--yes] [flags]
Archived claim directories (onDelete: archive) on the shares of the NFS StorageClasses, with
their age and size. Age: the time in the archive's name (archived-<subDir>-<UTC time>, this
driver's name when archived-<subDir> was taken), else the later of the directory's mtime and
ctime (csi-driver-nfs's archived-<subDir> carries no time; the rename that archived it set ctime).
NFS snapshots (<share>/.snapshots/<name>) are listed apart and never pruned: a complete one is
removed by DeleteSnapshot (delete its VolumeSnapshot or VolumeSnapshotContent), a partial one (a
copy that did not finish) by report --fix once it is older than report's grace period.
  --older-than DUR       only archives older than this (90d, 12h, 2w); required for prune
  --class NAME           only the shares of this StorageClass (repeatable)
  --no-sizes             do not measure sizes (walks every archived tree)
  --yes                  prune: remove them (without it prune lists exactly what it would remove)
  --nfs-port N --nfs-mount-port N   NFS server ports instead of its portmapper (as the driver's flags)
${COMMON_FLAGS_HELP.split('\n')
  .filter((l) => !/--config/.test(l))
  .join('\n')}
No Proxmox privileges are needed. Kubernetes: list StorageClasses and PersistentVolumes.
${EXIT_CODES_HELP}`;

interface Row extends Archive {
  server: string;
  share: string;
  classes: string[];
  /** Where --yes removes it from (the innermost class share holding it). */
  remove: { server: string; share: string; path: string };
  result?: string;
}

function format(rows: readonly Row[], now: number, mode: 'list' | 'dry-run' | 'pruned', olderThanMs?: number): string {
  if (rows.length === 0)
    return `no archives${olderThanMs !== undefined ? ` older than ${formatAge(olderThanMs)}` : ''}\n`;
  const out = table(
    ['SHARE', 'ARCHIVE', 'WAS', 'ARCHIVED', 'AGE', 'SIZE', ...(mode === 'list' ? [] : ['PRUNE'])],
    rows.map((r) => [
      `${r.server}:${r.share}`,
      r.path,
      r.original,
      `${new Date(r.archivedAt).toISOString().replace(/\.\d+Z$/, 'Z')}${r.timeFrom === 'times' ? ' (mtime/ctime)' : ''}`,
      formatAge(now - r.archivedAt),
      formatBytes(r.sizeBytes),
      ...(mode === 'list' ? [] : [r.result ?? 'would remove']),
    ]),
  );
  const total = rows.reduce((a, r) => a + (r.sizeBytes ?? 0), 0);
  const going = rows.filter((r) => r.result === undefined);
  const tail =
    mode === 'list'
      ? `${rows.length} archive(s), ${formatBytes(total)}`
      : mode === 'dry-run'
        ? `${going.length} archive(s), ${formatBytes(going.reduce((a, r) => a + (r.sizeBytes ?? 0), 0))} would be removed: run again with --yes to remove them`
        : `${rows.filter((r) => r.result === 'removed').length} removed, ${rows.filter((r) => r.result?.startsWith('failed')).length} failed`;
  return `${out}\n${tail}\n`;
}

/**
 * Right before removing: still an archive path, still old enough, and the rule (ownership.ts)
 * still allows it with the PVs as they are now (a static PV may have been made to recover data).
 */
async function recheck(
  kube: KubeApi,
  nfs: Pick<NfsFacts, 'classes' | 'addresses'>,
  store: NfsStore,
  r: Row,
  cutoff: number,
  signal: AbortSignal,
): Promise<string | undefined> {
  if (!isArchivePath(r.path)) return 'not an archived-* path';
  const j = judgeArchive(nfsView(nfs, await kube.listPersistentVolumes(signal)), r.server, absolute(r.share, r.path));
  if (j.kept) return j.kept;
  if (archiveStampOf(r.path) === undefined) {
    const st = await store.stat(r.remove.path, { signal });
    if (!st) return 'gone';
    if (Math.max(st.mtimeMs ?? 0, st.ctimeMs ?? 0) > cutoff) return 'changed since the listing';
  }
  return undefined;
}

async function run(argv: string[], io: Io): Promise<number> {
  const { common, values, positionals } = parseFlags(
    'archives',
    argv,
    {
      'older-than': { type: 'string' },
      class: { type: 'string', multiple: true },
      'no-sizes': { type: 'boolean' },
      'nfs-port': { type: 'string' },
      'nfs-mount-port': { type: 'string' },
    },
    { positionals: 1 },
  );
  if (common.help) {
    io.out.write(USAGE + '\n');
    return EXIT.OK;
  }
  const verb = positionals[0];
  if (verb !== 'list' && verb !== 'prune')
    throw new UsageError(`expected "list" or "prune"${verb ? `, not "${verb}"` : ''} (see archives --help)`);
  if (common.config || common.configSecret)
    throw new UsageError('archives reads no Proxmox config (--config/--config-secret)');
  const olderRaw = typeof values['older-than'] === 'string' ? values['older-than'] : undefined;
  if (verb === 'prune' && olderRaw === undefined)
    throw new UsageError('prune needs --older-than (e.g. 90d): there is no default age to delete data at');
  if (verb === 'list' && common.yes) throw new UsageError('--yes goes with prune');
  const olderThanMs = olderRaw !== undefined ? parseAge(olderRaw, 'older-than') : undefined;
  const only = Array.isArray(values.class) ? (values.class as string[]) : [];
  const signal = AbortSignal.timeout(common.timeoutMs);
  const log = pino({ level: io.env.PVE_NFS_CSI_LOG_LEVEL ?? 'silent' }, destination(2));

  const kube = await kubeFrom(common, io.env);
  const all = nfsClasses(await kube.listStorageClasses(signal));
  const classes = all.filter((c) => only.length === 0 || only.includes(c.name));
  const missing = only.filter((n) => !classes.some((c) => c.name === n));
  if (missing.length) throw new UsageError(`--class: no NFS StorageClass ${missing.join(', ')}`);
  const stores = createNfsStores({
    timeoutMs: 30_000,
    nfsPort: parsePort(values['nfs-port'], 'nfs-port'),
    mountPort: parsePort(values['nfs-mount-port'], 'nfs-mount-port'),
    privilegedPort: true,
    log,
  });
  try {
    const now = Date.now();
    const cutoff = olderThanMs !== undefined ? now - olderThanMs : Infinity;
    // Every class judges an archive (one of another class's layout is not this one's to prune).
    const pvs = await kube.listPersistentVolumes(signal);
    const nfs = await readNfs(all, pvs, stores, {
      signal,
      sizes: values['no-sizes'] !== true,
      scan: classes,
      claims: false,
    });
    if (nfs.errors.length)
      throw new Error(`cannot scan ${nfs.errors.map((e) => `${e.where} (${e.error})`).join('; ')}`);
    const rows: Row[] = archiveVerdicts(nfs, pvs)
      .filter((v) => v.archive.archivedAt <= cutoff)
      .map((v) => {
        const { server, share, at: _at, ...a } = v.archive;
        const row: Row = { ...a, server, share, classes: v.classes, remove: v.remove };
        // The dry run lists exactly what --yes removes: what the rule keeps is kept in both.
        if (verb === 'prune' && v.kept) row.result = `kept: ${v.kept}`;
        return row;
      });
    rows.sort((a, b) => a.archivedAt - b.archivedAt);
    const snapshots = snapshotRows(nfs);
    if (verb === 'list' || !common.yes) {
      const mode = verb === 'list' ? 'list' : 'dry-run';
      io.out.write(
        common.json
          ? JSON.stringify({ ok: true, mode, olderThanMs, archives: rows, snapshots }, null, 2) + '\n'
          : format(rows, now, mode, olderThanMs) + formatSnapshots(snapshots, now, mode),
      );
      return verb === 'prune' && rows.some((r) => r.result === undefined) ? EXIT.FINDINGS : EXIT.OK;
    }
    for (const r of rows.filter((x) => x.result === undefined)) {
      const store = stores.open(r.remove.server, r.remove.share);
      try {
        const why = await recheck(kube, nfs, store, r, cutoff, signal);
        if (why) r.result = `kept: ${why}`;
        else {
          await deleteVolumeDir(store, r.remove.path, { signal });
          r.result = 'removed';
        }
      } catch (e) {
        r.result = `failed: ${(e as Error).message}`;
      }
      io.err.write(`${r.server}:${r.share}/${r.path}: ${r.result}\n`);
    }
    const failed = rows.some((r) => r.result?.startsWith('failed'));
    io.out.write(
      common.json
        ? JSON.stringify({ ok: !failed, mode: 'pruned', olderThanMs, archives: rows, snapshots }, null, 2) + '\n'
        : format(rows, now, 'pruned') + formatSnapshots(snapshots, now, 'pruned'),
    );
    return failed ? EXIT.FAILED : EXIT.OK;
  } finally {
    await stores.close();
  }
}

export const archives: Subcommand = {
  summary:
    'list archived NFS claim directories and NFS snapshots with age and size; prune --older-than DUR removes old archives',
  run: (argv, io) => runCommand('archives', io, () => run(argv, io)),
};
