// From the NFS facts to report's findings and to what `report --fix` and `archives prune` may
// remove: the rule of ownership.ts applied to every claim-shaped directory and every archive,
// once, across all shares (a directory two classes can reach is one directory). Pure.
import type { Archive } from '../../nfs/controller/archives.js';
import type { NfsArchive, NfsDir, NfsFacts, NfsRestoreMarker, NfsSnapshotDir, NfsUpstreamSnapshot } from './facts.js';
import { upstreamSnapshotId } from '../../nfs/controller/snapshots/upstream-snapshot-scan.js';
import { parseVolumeId } from '../../nfs/volume-id.js';
import type { Finding, Rules } from './findings.js';
import { bornBefore } from './findings.js';
import {
  absolute,
  innermostShare,
  judgeArchive,
  judgeClaimDir,
  nfsPlaceOf,
  referencedBy,
  servers,
  within,
  type View,
} from './ownership.js';
import { SNAPSHOTS } from '../../nfs/controller/snapshots/snapshots.js';
import type { KubeFacts } from './facts.js';
import type { V1PersistentVolume } from '../../k8s/index.js';

export function nfsView(n: Pick<NfsFacts, 'classes' | 'addresses'>, pvs: readonly V1PersistentVolume[]): View {
  return { classes: n.classes, pvs, servers: servers(n.addresses) };
}

/** The removal, relative to the innermost class share holding it (parents are removed up to there). */
function removal(v: View, d: { server: string; share: string; path: string; at: string }) {
  const inner = innermostShare(v, d.server, d.at);
  const share = inner?.share ?? d.share;
  return { server: inner?.server ?? d.server, share, path: d.at.slice(share.length).replace(/^\//, '') };
}

function dirFinding(v: View, d: NfsDir, k: KubeFacts, r: Rules): Finding | undefined {
  const j = judgeClaimDir(v, d.server, d.at);
  if (j.pv) return undefined;
  const at = `${d.server}:${d.share}`;
  const names = j.of.map((c) => c.name).join(', ') || '(none)';
  const policies = [...new Set(j.of.map((c) => c.onDelete ?? 'driver default'))];
  const age = r.now - d.changedAt;
  if (policies.length === 1 && (policies[0] === 'retain' || policies[0] === 'archive'))
    return {
      kind: 'retained-dir',
      where: at,
      what: d.path,
      detail: `kept by onDelete: ${policies[0]} of class ${names}`,
      ageMs: age,
    };
  const f: Finding = {
    kind: 'orphan-dir',
    where: at,
    what: d.path,
    detail: `a claim directory of class ${names} by its layout; no PersistentVolume points there`,
    ageMs: age,
  };
  if (j.kept) f.kept = j.kept;
  else if (age < r.graceMs)
    f.kept = `changed within the grace period (${Math.round(r.graceMs / 1000)} s): may be a CreateVolume in flight`;
  else if (k.birth === undefined || d.changedAt < k.birth) f.kept = bornBefore(k.birth);
  else f.action = { type: 'remove-dir', ...removal(v, d) };
  return f;
}

/** Whether an archive may be pruned (age aside), and where it is removed from. */
export interface ArchiveVerdict {
  archive: NfsArchive;
  classes: string[];
  kept?: string;
  remove: { server: string; share: string; path: string };
}

/** The archives some class lays out (others are not archives), each judged once. */
export function archiveVerdicts(
  n: Pick<NfsFacts, 'classes' | 'addresses' | 'archives'>,
  pvs: readonly V1PersistentVolume[],
): ArchiveVerdict[] {
  const v = nfsView(n, pvs);
  return n.archives.flatMap((a) => {
    const j = judgeArchive(v, a.server, a.at);
    if (j.of.length === 0 && !j.pv) return [];
    return [
      {
        archive: a,
        classes: j.of.map((c) => c.name),
        ...(j.kept && { kept: j.kept }),
        remove: removal(v, { ...a, path: a.path }),
      },
    ];
  });
}

export function archiveFinding(at: string, a: Archive, now: number): Finding {
  return {
    kind: 'archive',
    where: at,
    what: a.path,
    ageMs: now - a.archivedAt,
    detail: `archived ${a.original} (time from ${a.timeFrom === 'name' ? 'its name' : "the directory's mtime/ctime"})`,
    ...(a.sizeBytes !== undefined && { sizeBytes: a.sizeBytes }),
  };
}

/** The claim a snapshot was taken of, as its source handle names it. */
export function sourceClaimOf(handle: string): string {
  const v = parseVolumeId(handle);
  return v ? v.subDir || '(share root)' : handle;
}

/**
 * The PV that uses a directory of a share's snapshot store: one whose directory is inside the
 * store and at, above or below it (a claim of a class whose subDir named the store — refused now,
 * but older PVs stay — or a static PV pointing into a copy), or one that cannot be read. A PV of
 * the whole share does not count: it holds the store as any directory, not as a volume.
 */
export function snapshotDirUser(
  v: View,
  d: { server: string; share: string; dir: string },
): { pv: string; readable: boolean } | undefined {
  const store = absolute(d.share, SNAPSHOTS);
  const at = absolute(d.share, d.dir);
  for (const pv of v.pvs) {
    const p = nfsPlaceOf(pv);
    if (p === null) continue;
    const name = pv.metadata?.name ?? '?';
    if (p === 'unknown') return { pv: name, readable: false };
    if (!within(p.path, store) || !(within(p.path, at) || within(at, p.path))) continue;
    if (referencedBy({ ...v, pvs: [pv] }, d.server, at)) return { pv: name, readable: true };
  }
  return undefined;
}

/**
 * A snapshot directory: a complete one is information (only DeleteSnapshot, through its
 * VolumeSnapshotContent, removes it); a partial one is a leftover `report --fix` removes once
 * nothing below it changed within the grace period (no copy can be running into it: a copy sets
 * ctime on everything it makes) and its name is one the driver makes.
 */
export function snapshotFinding(v: View, s: NfsSnapshotDir, r: Rules): Finding {
  const where = `${s.server}:${s.share}`;
  if (s.complete)
    return {
      kind: 'nfs-snapshot',
      where,
      what: s.dir,
      detail: `snapshot ${s.name} of ${sourceClaimOf(s.complete.sourceVolumeId)} (complete; removed only by DeleteSnapshot)`,
      ageMs: r.now - s.complete.createdMs,
      sizeBytes: s.complete.sizeBytes,
    };
  const age = r.now - (s.changedAt ?? r.now);
  const f: Finding = {
    kind: 'partial-snapshot',
    where,
    what: s.dir,
    detail: `snapshot ${s.name} has no completion record: a copy that did not finish (a retry of CreateSnapshot copies again)`,
    ageMs: age,
    ...(s.sizeBytes !== undefined && { sizeBytes: s.sizeBytes }),
  };
  const user = snapshotDirUser(v, s);
  if (!s.ours) f.kept = 'its name is not one the driver gives a snapshot directory';
  else if (user)
    f.kept = user.readable
      ? `PV ${user.pv} uses it as a volume`
      : `PV ${user.pv} has an NFS directory that cannot be read from its handle or attributes: it might be this one`;
  else if (!s.changedAt) f.kept = 'the server reports no change times: a copy may be running into it';
  else if (age < r.graceMs)
    f.kept = `changed within the grace period (${Math.round(r.graceMs / 1000)} s): a CreateSnapshot may be copying`;
  else
    f.action = {
      type: 'remove-partial-snapshot',
      server: s.server,
      share: s.share,
      dir: s.dir,
      changedAt: s.changedAt,
    };
  return f;
}

/**
 * A csi-driver-nfs snapshot: information. This driver restores it (CreateVolume from its handle);
 * only DeleteSnapshot of that handle removes it, never --fix.
 */
export function upstreamSnapshotFinding(s: NfsUpstreamSnapshot, r: Rules): Finding {
  const times = s.archives.flatMap((a) => (a.mtimeMs === undefined ? [] : [a.mtimeMs]));
  const sizes = s.archives.flatMap((a) => (a.sizeBytes === undefined ? [] : [a.sizeBytes]));
  return {
    kind: 'upstream-snapshot',
    where: `${s.server}:${s.share}`,
    what: `${s.name}/${s.archives.map((a) => a.name).join(' + ')}`,
    detail:
      `csi-driver-nfs snapshot ${s.name} of ${s.src} (restorable by this driver from handle ` +
      `${upstreamSnapshotId(s.server, s.share, s)}; removed only by DeleteSnapshot)`,
    ...(times.length > 0 && { ageMs: r.now - Math.max(...times) }),
    ...(sizes.length > 0 && { sizeBytes: sizes.reduce((a, b) => a + b, 0) }),
  };
}

/**
 * A restore record. Provably left over only when its name is one the driver makes, it is still
 * the empty directory the driver made, the claim it names does not exist (a restore makes the
 * claim right after the record, so no attempt needs a record without its claim for longer than
 * a few calls) and nothing touched it within the grace period. A record next to an existing
 * claim is kept: a kill after the last byte and one in the middle leave the same claim, and
 * without its record the next CreateVolume would answer a partial claim as complete.
 */
export function restoreMarkerFinding(v: View, m: NfsRestoreMarker, r: Rules): Finding | undefined {
  // A finished restore's filled record next to its claim is what every restored claim has.
  if (m.filled && m.claim !== undefined && m.type === 'dir' && m.entries === 0 && m.target === 'dir') return undefined;
  const age = r.now - (m.changedAt ?? r.now);
  const claim = m.claim ?? '?';
  const f: Finding = {
    kind: 'restore-marker',
    where: `${m.server}:${m.share}`,
    what: m.path,
    detail: `record of a ${m.filled ? 'finished ' : ''}restore or clone into ${claim}, which ${m.target === 'missing' ? 'does not exist' : m.target === 'dir' ? 'exists' : `is ${m.target}`}`,
    ageMs: age,
  };
  if (m.claim === undefined) f.kept = 'its name is not one the driver gives a restore record';
  else if (m.type !== 'dir' || m.entries > 0)
    f.kept = `it is ${m.type === 'dir' ? `a directory holding ${m.entries} entries` : `a ${m.type}`}, not the empty record the driver makes`;
  else if (m.target === 'dir') {
    const pv = referencedBy(v, m.server, absolute(m.share, m.claim))?.pv;
    f.kept =
      `its claim directory exists: a restore into it is running or was cut (a partial claim looks like a ` +
      `complete one; the next CreateVolume of ${claim} empties and fills it again, and removes the record)` +
      (pv ? `; PV ${pv} uses that directory` : '; once the claim is removed (orphan-dir) the record is a leftover');
  } else if (m.target !== 'missing') f.kept = `what is at ${claim} cannot be told (${m.target}): the claim may exist`;
  else if (m.changedAt === undefined) f.kept = 'the server reports no change times: a restore may be starting';
  else if (age < r.graceMs)
    f.kept = `changed within the grace period (${Math.round(r.graceMs / 1000)} s): a restore may be starting`;
  else
    f.action = {
      type: 'remove-restore-marker',
      server: m.server,
      share: m.share,
      marker: m.path,
      changedAt: m.changedAt,
    };
  return f;
}

export function nfsFindings(n: NfsFacts, k: KubeFacts, r: Rules): Finding[] {
  return [...nfsJudgements(n, k, r)].filter((f): f is Finding => f !== undefined);
}

/**
 * nfsFindings one item at a time (undefined for an item that is no finding), so a caller can
 * hand the event loop back between items: the controller's findings refresh judges tens of
 * thousands of claim directories in slices.
 */
export function* nfsJudgements(n: NfsFacts, k: KubeFacts, r: Rules): Generator<Finding | undefined> {
  for (const e of n.errors) yield { kind: 'error', where: e.where, what: 'share', detail: `cannot scan: ${e.error}` };
  const v = nfsView(n, k.pvs);
  for (const d of n.dirs) yield dirFinding(v, d, k, r);
  for (const a of archiveVerdicts(n, k.pvs))
    yield archiveFinding(`${a.archive.server}:${a.archive.share}`, a.archive, r.now);
  for (const s of n.snapshots) yield snapshotFinding(v, s, r);
  for (const s of n.upstreamSnapshots) yield upstreamSnapshotFinding(s, r);
  for (const m of n.restoreMarkers) yield restoreMarkerFinding(v, m, r);
}

/** NFS PVs whose directory is missing, for the shares that could be read. */
export function missingDirFindings(
  missing: ReadonlyArray<{ pv: V1PersistentVolume; server: string; share: string; subDir: string }>,
): Finding[] {
  return missing.map((m) => ({
    kind: 'pv-missing-dir',
    where: `${m.server}:${m.share}`,
    what: `PV ${m.pv.metadata?.name}`,
    detail: `${m.subDir || '(share root)'} does not exist (PV phase ${m.pv.status?.phase ?? '?'})`,
  }));
}
