// The day-2 ownership rule for NFS (docs/ownership-day2.md), shared by `report --fix` and
// `archives prune`: a directory is removable only when the driver can prove it made it and
// nothing references it. Pure: every input is a gathered fact, so the rule is a unit test (and a
// property-based search) away, and report's findings are exactly what --fix acts on.
//   - Places are compared as directories, not spellings: a server is the set of addresses its
//     name resolves to (localhost and 127.0.0.1 are one server), a path is the normalised
//     absolute share + subDir (a static PV naming the parent share with a longer subDir is the
//     same directory).
//   - A path is judged against every NFS class whose share covers it (nested shares included):
//     one that could have made it as something else (a namespace directory, a path inside a claim,
//     an archive, its share root) keeps it.
//   - Every PV (csi nfs.csi.k8s.io or in-tree nfs, any phase) at, above or below the path keeps
//     it; one whose directory cannot be read keeps everything.
import path from 'node:path';
import type { V1PersistentVolume } from '../../k8s/index.js';
import { parseVolumeId as parseNfsHandle } from '../../nfs/volume-id.js';
import { layoutOf, proves, relate, type Layout, type Relation } from './layout.js';

export const NFS_DRIVER = 'nfs.csi.k8s.io';

/** What each spelled server name resolved to (lower case name -> addresses; empty: unresolved). */
export type Addresses = ReadonlyMap<string, readonly string[]>;

/** Lower case name -> one id per server; names resolving to a common address share the id. */
export function serverIds(addresses: Addresses): Map<string, string> {
  const names = [...addresses.keys()].sort();
  const id = new Map(names.map((n) => [n, n]));
  const find = (n: string): string => {
    let r = n;
    while (id.get(r) !== r) r = id.get(r) ?? r;
    return r;
  };
  const byAddress = new Map<string, string>();
  for (const n of names) {
    for (const a of addresses.get(n) ?? []) {
      const other = byAddress.get(a);
      if (other === undefined) byAddress.set(a, n);
      else {
        const [x, y] = [find(n), find(other)].sort() as [string, string];
        id.set(y, x);
      }
    }
  }
  return new Map(names.map((n) => [n, find(n)]));
}

export interface Servers {
  /** The id of a server name; undefined when it did not resolve (it may be any server). */
  idOf(name: string): string | undefined;
}

export function servers(addresses: Addresses): Servers {
  const ids = serverIds(addresses);
  return {
    idOf: (name) => {
      const n = name.trim().toLowerCase();
      return (addresses.get(n)?.length ?? 0) > 0 ? ids.get(n) : undefined;
    },
  };
}

/** "/" + share + "/" + subDir, normalised, without a trailing slash. */
export function absolute(share: string, subDir = ''): string {
  const p = path.posix.normalize(`/${share}/${subDir}`);
  return p.length > 1 ? p.replace(/\/+$/, '') : '/';
}

/** under(a, b): a is b or below it. */
export const within = (a: string, b: string): boolean => a === b || b === '/' || a.startsWith(b + '/');

const lower = (p: Record<string, string> | undefined): Record<string, string | undefined> =>
  Object.fromEntries(Object.entries(p ?? {}).map(([k, v]) => [k.toLowerCase(), v]));

/** Where an NFS PV's directory is: null when it is not an NFS PV, 'unknown' when unreadable. */
export interface NfsPlace {
  server: string;
  /** As the PV spells them (share absolute, subDir relative), for reaching the directory. */
  share: string;
  subDir: string;
  /** The directory: absolute(share, subDir). */
  path: string;
}

const placeAt = (server: string, share: string, subDir: string): NfsPlace => {
  const s = absolute(share);
  const d = subDir.replace(/^\/+|\/+$/g, '');
  return { server, share: s, subDir: d, path: absolute(s, d) };
};

export function nfsPlaceOf(pv: V1PersistentVolume): NfsPlace | 'unknown' | null {
  const legacy = pv.spec?.nfs;
  if (legacy) return legacy.server && legacy.path ? placeAt(legacy.server, legacy.path, '') : 'unknown';
  const csi = pv.spec?.csi;
  if (csi?.driver !== NFS_DRIVER) return null;
  const a = lower(csi.volumeAttributes);
  if (a.server && a.share !== undefined) return placeAt(a.server, a.share, a.subdir ?? '');
  const ref = parseNfsHandle(csi.volumeHandle);
  return ref ? placeAt(ref.server, ref.share, ref.subDir) : 'unknown';
}

/** The NFS StorageClasses as the rule needs them. */
export interface ClassPlace {
  name: string;
  server: string;
  /** Absolute share path. */
  share: string;
  layout: Layout;
  /** onDelete as the class says it (lower case); undefined: the driver default. */
  onDelete?: string;
}

export function classPlace(name: string, parameters: Record<string, string> | undefined): ClassPlace | undefined {
  const p = lower(parameters);
  if (!p.server || p.share === undefined) return undefined;
  return {
    name,
    server: p.server,
    share: absolute(p.share),
    layout: layoutOf(p.subdir),
    ...(p.ondelete && { onDelete: p.ondelete.toLowerCase() }),
  };
}

export interface View {
  classes: readonly ClassPlace[];
  pvs: readonly V1PersistentVolume[];
  servers: Servers;
}

export interface Judgement {
  /** The classes whose claim (or archive) it is by their layout. */
  of: ClassPlace[];
  /** Why it must stay, when it must; undefined when the rule allows removing it. */
  kept?: string;
  /** A PV at, above or below it (the directory is in use: not a leftover at all). */
  pv?: string;
}

const sameServer = (v: View, a: string, b: string): boolean => {
  const [x, y] = [v.servers.idOf(a), v.servers.idOf(b)];
  return x === undefined || y === undefined || x === y;
};

/**
 * The NFS PVs of a view indexed by server and directory, built once per view: judging N
 * directories against M PVs costs N × depth + M × depth lookups instead of N × M place parses.
 * `at` holds each PV directory's first PV (its index in v.pvs), `below` each proper ancestor's
 * first PV beneath it; PVs whose server did not resolve sit under the key undefined (they may be
 * on any server).
 */
interface PvIndex {
  names: string[];
  /** Index of the first PV whose directory cannot be read; Infinity when none. */
  firstUnknown: number;
  byServer: Map<string | undefined, { at: Map<string, number>; below: Map<string, number> }>;
  /** Server ids that have a PV whose server resolved. */
  ids: Set<string>;
}

const indexes = new WeakMap<View, PvIndex>();

/** "/a/b" -> ["/a", "/"]: every proper ancestor of a normalised absolute path. */
export function ancestors(p: string): string[] {
  const out: string[] = [];
  for (let i = p.lastIndexOf('/'); p !== '/' && i >= 0; i = p.lastIndexOf('/', i - 1)) {
    out.push(i === 0 ? '/' : p.slice(0, i));
    if (i === 0) break;
  }
  return out;
}

const keepFirst = (m: Map<string, number>, k: string, i: number) => {
  if (!m.has(k)) m.set(k, i);
};

function pvIndex(v: View): PvIndex {
  const known = indexes.get(v);
  if (known) return known;
  const ix: PvIndex = { names: [], firstUnknown: Infinity, byServer: new Map(), ids: new Set() };
  v.pvs.forEach((pv, i) => {
    ix.names.push(pv.metadata?.name ?? '?');
    const p = nfsPlaceOf(pv);
    if (p === null) return;
    if (p === 'unknown') {
      ix.firstUnknown = Math.min(ix.firstUnknown, i);
      return;
    }
    const id = v.servers.idOf(p.server);
    if (id !== undefined) ix.ids.add(id);
    let b = ix.byServer.get(id);
    if (!b) ix.byServer.set(id, (b = { at: new Map(), below: new Map() }));
    keepFirst(b.at, p.path, i);
    for (const a of ancestors(p.path)) keepFirst(b.below, a, i);
  });
  indexes.set(v, ix);
  return ix;
}

/**
 * The first PV that references the directory (at, above or below it), or whose directory
 * cannot be read (it might be this one): undefined when none.
 */
export function referencedBy(v: View, server: string, at: string): { pv: string; readable: boolean } | undefined {
  const ix = pvIndex(v);
  const id = v.servers.idOf(server);
  // A server that did not resolve may be any server; a PV's that did not, too (sameServer).
  const buckets = id === undefined ? [...ix.byServer.values()] : [ix.byServer.get(id), ix.byServer.get(undefined)];
  let first = Infinity;
  for (const b of buckets) {
    if (!b) continue;
    for (const p of [at, ...ancestors(at)]) first = Math.min(first, b.at.get(p) ?? Infinity);
    first = Math.min(first, b.below.get(at) ?? Infinity);
  }
  if (ix.firstUnknown < first) return { pv: ix.names[ix.firstUnknown] ?? '?', readable: false };
  return first === Infinity ? undefined : { pv: ix.names[first] ?? '?', readable: true };
}

function referenceKept(ref: { pv: string; readable: boolean }, verb: string): string {
  return ref.readable
    ? `PV ${ref.pv} ${verb}`
    : `PV ${ref.pv} has an NFS directory that cannot be read from its handle or attributes: it might be this one`;
}

/** Whether any NFS PV of the view is on this server: else the view cannot own its directories. */
export function hasPvOn(v: View, server: string): boolean {
  const id = v.servers.idOf(server);
  return id !== undefined && pvIndex(v).ids.has(id);
}

function relations(v: View, server: string, at: string): Array<{ c: ClassPlace; rel: string; r: Relation }> {
  return v.classes
    .filter((c) => sameServer(v, c.server, server) && (within(at, c.share) || within(c.share, at)))
    .map((c) => {
      const rel = within(at, c.share) ? at.slice(c.share.length).replace(/^\//, '') : undefined;
      return { c, rel: rel ?? '', r: relate(c.layout, rel) };
    });
}

function conflict(rs: ReturnType<typeof relations>, want: Relation): string | undefined {
  const other = rs.find((x) => x.r !== want && x.r !== 'unrelated');
  if (!other) return undefined;
  const what: Record<Relation, string> = {
    share: 'is the share of',
    'claim-parent': 'holds claims of',
    'inside-claim': 'lies inside a claim of',
    claim: 'is a claim directory of',
    archive: 'is an archive of',
    'archive-parent': 'holds archives of',
    'inside-archive': 'lies inside an archive of',
    unrelated: '',
  };
  return `it ${what[other.r]} class ${other.c.name} (${other.c.layout.template} on ${other.c.share}) as well`;
}

/** A claim-shaped directory without a PV: may `report --fix` remove it? */
export function judgeClaimDir(v: View, server: string, at: string): Judgement {
  const rs = relations(v, server, at);
  const of = rs.filter((x) => x.r === 'claim').map((x) => x.c);
  const ref = referencedBy(v, server, at);
  if (ref) return { of, kept: referenceKept(ref, 'refers to it'), ...(ref.readable && { pv: ref.pv }) };
  const clash = conflict(rs, 'claim');
  if (clash) return { of, kept: clash };
  if (of.length === 0) return { of, kept: 'no class lays out a claim there' };
  const policies = [...new Set(of.map((c) => c.onDelete ?? 'driver default'))];
  if (policies.length !== 1 || policies[0] !== 'delete')
    return { of, kept: `class onDelete is ${policies.join(' / ')}, not delete: the data may be kept on purpose` };
  const proof = rs.some((x) => x.r === 'claim' && proves(x.c.layout, x.rel));
  if (!proof)
    return {
      of,
      kept: `its name does not prove a provisioned claim (${of.map((c) => c.layout.template).join(', ')} has no \${pv.metadata.name}): it may be data put there by hand`,
    };
  if (!hasPvOn(v, server))
    return { of, kept: `this cluster has no NFS PV on ${server}: it may not be the cluster that made the directory` };
  return { of };
}

/** An archived-* directory: may `archives prune` remove it (age aside)? */
export function judgeArchive(v: View, server: string, at: string): Judgement {
  const rs = relations(v, server, at);
  const of = rs.filter((x) => x.r === 'archive').map((x) => x.c);
  const ref = referencedBy(v, server, at);
  if (ref) return { of, kept: referenceKept(ref, 'points there'), ...(ref.readable && { pv: ref.pv }) };
  const clash = conflict(rs, 'archive');
  if (clash) return { of, kept: clash };
  if (of.length === 0) return { of, kept: 'no class lays out an archive there' };
  if (!hasPvOn(v, server))
    return { of, kept: `this cluster has no NFS PV on ${server}: it may not be the cluster whose PVs read archives` };
  return { of };
}

/** The innermost class share that holds `at`: where a removal opens its store (parents stop there). */
export function innermostShare(v: View, server: string, at: string): ClassPlace | undefined {
  return v.classes
    .filter((c) => sameServer(v, c.server, server) && at !== c.share && within(at, c.share))
    .sort((a, b) => b.share.length - a.share.length)[0];
}
