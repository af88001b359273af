// Generated day-2 worlds and the oracle of docs/ownership-day2.md, for the property-based
// search over the pure rule (day2-property.test.ts) and over the commands against a real
// kube-apiserver and ganesha (test/k8s/cli/ownership.test.ts). A world: NFS classes of every
// depth on nested shares spelled with two names of one server, claims each class really made
// (live, Released/Retain with a PV, or gone), data put there by hand, archives, PVs in every
// spelling (dynamic handle, static on the parent share, localhost, in-tree, another server), and
// the view: the owner cluster's, another cluster's (no PVs) or a rebuilt cluster's. The oracle
// knows each world's truth and is written from the document, not from the rule's code.
import fc from 'fast-check';
import type { NfsFacts } from '../../../src/cli/report/facts.js';
import { nfsClasses } from '../../../src/cli/report/facts.js';
import { absolute } from '../../../src/cli/report/ownership.js';
import type { V1PersistentVolume } from '../../../src/k8s/index.js';
import { archivePath } from '../../../src/nfs/controller/rpc/policy.js';
import { ADDRESSES, dynamicNfsPv, HOUR, inTreeNfsPv, NOW, nfsClass, staticNfsPv, uid } from './day2-fixtures.js';

/** A server that is not 127.0.0.1 (ADDRESSES resolves it elsewhere; on a real host it does not resolve). */
export const OTHER_SERVER = 'nas';

const SUBSHARES = ['', '/k8s', '/k8s/talos'] as const;
const SHARE_ARB = fc.constantFrom(...SUBSHARES);
const TEMPLATES = [
  undefined,
  '${pvc.metadata.namespace}/${pvc.metadata.name}',
  '${pvc.metadata.namespace}/${pv.metadata.name}',
  '${pvc.metadata.name}',
  '${pv.metadata.name}',
] as const;
const POLICIES = ['delete', 'retain', 'archive', undefined] as const;
const NAMESPACES = ['apps', 'media', 'talos', 'k8s', 'photos'] as const;
const NAMES = ['data', 'config', 'old-config', 'app', 'talos'] as const;
const USER_DATA = ['photos/2023', 'backups/nightly', 'media', 'media/old-config', 'talos/photos', 'k8s', 'apps/data'];
export const BIRTH_AGO = 30 * 24 * HOUR;
export const AGES = [5 * 60e3, 48 * HOUR, 40 * 24 * HOUR]; // young (in grace), old, older than the cluster
export const SPELLINGS = ['dynamic', 'parent-share', 'localhost', 'in-tree', 'slashes', 'other-server'] as const;
type Spelling = (typeof SPELLINGS)[number];

const classArb = fc.record({
  share: SHARE_ARB,
  template: fc.constantFrom(...TEMPLATES),
  onDelete: fc.constantFrom(...POLICIES),
  server: fc.constantFrom('127.0.0.1', 'localhost'),
});
const claimArb = fc.record({
  cls: fc.nat(2),
  ns: fc.constantFrom(...NAMESPACES),
  name: fc.constantFrom(...NAMES),
  n: fc.nat(30),
  /** null: gone (no PV); else the PV's spelling (any phase: a Released/Retain PV counts). */
  pv: fc.option(fc.constantFrom(...SPELLINGS), { nil: null }),
  age: fc.constantFrom(...AGES),
  archived: fc.constantFrom(false, false, true),
  stamped: fc.boolean(),
});
export const worldArb = fc.record({
  classes: fc.array(classArb, { minLength: 1, maxLength: 3 }),
  claims: fc.array(claimArb, { maxLength: 8 }),
  user: fc.array(fc.record({ share: SHARE_ARB, path: fc.constantFrom(...USER_DATA) }), {
    maxLength: 4,
  }),
  /** PVs made by hand on a directory of the world or one above it (a recovery mount). */
  parentPvs: fc.array(fc.record({ of: fc.nat(12), up: fc.nat(2), spelling: fc.constantFrom(...SPELLINGS) }), {
    maxLength: 2,
  }),
  view: fc.constantFrom('owner', 'owner', 'owner', 'foreign', 'rebuilt'),
  /**
   * Snapshot directories (<share>/.snapshots/<name>) on any share, class share or not: complete or
   * partial, old or young, with or without server times, named as the driver names them or not.
   */
  snapshots: fc.array(
    fc.record({
      share: SHARE_ARB,
      name: fc.constantFrom(
        'snapshot-a',
        'snapshot-b',
        'archived-x',
        'pvc-00000000-0000-0000-0000-000000000001',
        '%61',
      ),
      complete: fc.boolean(),
      age: fc.constantFrom(...AGES),
      times: fc.constantFrom(true, true, false),
    }),
    { maxLength: 3 },
  ),
  /**
   * Restore records (<share>/.snapshots/.restore-<claim>, or .filled-<claim>@<volume name> once finished) on any share: of a directory of the world
   * (`of`, which exists) or of a claim that does not, named as the driver names them or not, the
   * empty directory the driver makes or not, old or young, with or without server times.
   */
  markers: fc.array(
    fc.record({
      share: SHARE_ARB,
      of: fc.option(fc.nat(12), { nil: null }),
      odd: fc.constantFrom(false, false, false, true),
      // The record of a fill under way (.restore-<claim>) or of a finished one (.filled-<claim>@<volume name>).
      filled: fc.boolean(),
      shape: fc.constantFrom('empty', 'empty', 'empty', 'full', 'file'),
      age: fc.constantFrom(...AGES),
      times: fc.constantFrom(true, true, false),
    }),
    { maxLength: 3 },
  ),
});
export type World = typeof worldArb extends fc.Arbitrary<infer W> ? W : never;

interface Item {
  at: string;
  kind: 'claim' | 'archive' | 'user';
  cls?: number;
  age: number;
}

function expand(template: string | undefined, ns: string, name: string, pvName: string): string {
  return (template ?? '${pv.metadata.name}')
    .replace('${pvc.metadata.namespace}', ns)
    .replace('${pvc.metadata.name}', name)
    .replace('${pv.metadata.name}', pvName);
}

/** A PV on the directory `at` of server 127.0.0.1, spelled one way or another. */
function pvFor(
  root: string,
  name: string,
  at: string,
  spelling: Spelling,
  classShare: string | undefined,
): V1PersistentVolume {
  const rel = (base: string) => at.slice(base.length).replace(/^\//, '');
  switch (spelling) {
    case 'dynamic':
      return classShare && at.startsWith(classShare + '/')
        ? dynamicNfsPv(name, '127.0.0.1', classShare, rel(classShare))
        : staticNfsPv(name, '127.0.0.1', root, rel(root));
    case 'parent-share':
      return staticNfsPv(name, '127.0.0.1', root, rel(root));
    case 'localhost': {
      const k8s = `${root}/k8s`;
      return staticNfsPv(name, 'localhost', k8s, at.startsWith(k8s + '/') ? rel(k8s) : '../' + rel(root));
    }
    case 'in-tree':
      return inTreeNfsPv(name, 'localhost', at);
    case 'slashes':
      return staticNfsPv(name, '127.0.0.1', `/${root}/`, `/${rel(root)}/.`);
    case 'other-server':
      return staticNfsPv(name, OTHER_SERVER, root, rel(root));
  }
}

/** The world as it is (its shares below `root`), the PVs that exist, and what the view shows. */
export function build(w: World, root = '/v', prefix = '') {
  const shares = SUBSHARES.map((s) => root + s);
  const classes = w.classes.map((c, i) => nfsClass(`${prefix}c${i}`, root + c.share, c.template, c.onDelete, c.server));
  const items: Item[] = [];
  const truePvs: V1PersistentVolume[] = [];
  const dirs = new Set<string>();
  const add = (it: Item) => {
    if (items.some((x) => x.at === it.at)) return;
    items.push(it);
    const segs = it.at.split('/');
    for (let i = 2; i <= segs.length; i++) dirs.add(segs.slice(0, i).join('/'));
  };
  for (const s of shares) dirs.add(s);
  for (const c of w.claims) {
    const cls = w.classes[c.cls % w.classes.length];
    if (!cls) continue;
    const pvName = `pvc-${uid(c.n + 1)}`;
    const sub = expand(cls.template, c.ns, c.name, pvName);
    const rel = c.archived ? archivePath(sub) + (c.stamped ? '-20250101T000000Z' : '') : sub;
    const at = absolute(root + cls.share, rel);
    add({ at, kind: c.archived ? 'archive' : 'claim', cls: c.cls % w.classes.length, age: c.age });
    if (c.pv !== null)
      // PV names are unique in a cluster: a second claim of the same generated uid gets a suffix.
      truePvs.push(
        pvFor(root, `${prefix}${pvName}${c.archived ? '-recover' : ''}-${truePvs.length}`, at, c.pv, root + cls.share),
      );
  }
  for (const u of w.user) add({ at: absolute(root + u.share, u.path), kind: 'user', age: AGES[1] ?? 0 });
  w.parentPvs.forEach((p, i) => {
    const it = items[p.of % Math.max(1, items.length)];
    if (!it) return;
    const at = it.at
      .split('/')
      .slice(0, Math.max(2, it.at.split('/').length - p.up))
      .join('/');
    truePvs.push(pvFor(root, `${prefix}static-${i}`, at, p.spelling, undefined));
  });
  const seen =
    w.view === 'foreign'
      ? []
      : w.view === 'rebuilt'
        ? truePvs.filter((_, i) => i % 2 === 1) // the rebuilt cluster re-adopted some, not all
        : truePvs;
  // The PVs that exist: another cluster's all are there (the view is the wrong one); a rebuilt
  // cluster's are what it shows (the old cluster and its PVs are gone).
  const existing = w.view === 'rebuilt' ? seen : truePvs;
  const snaps = w.snapshots
    .map((x) => ({ ...x, share: root + x.share, at: absolute(root + x.share, `.snapshots/${x.name}`) }))
    .filter((x, i, all) => all.findIndex((y) => y.at === x.at) === i);
  const markers = w.markers
    .map((m) => {
      const share = root + m.share;
      const it = m.of === null ? undefined : items[m.of % Math.max(1, items.length)];
      const claim = it && it.at.startsWith(share + '/') ? it.at.slice(share.length + 1) : `pvc-${uid(99)}`;
      const entry = m.filled
        ? m.odd
          ? `.filled-${encodeURIComponent(claim)}@`
          : `.filled-${encodeURIComponent(claim)}@pvc-${uid(98)}`
        : m.odd
          ? '.restore-%2E%2E'
          : `.restore-${encodeURIComponent(claim)}`;
      const path = `.snapshots/${entry}`;
      return { ...m, share, claim, path, at: absolute(share, path), exists: dirs.has(absolute(share, claim)) };
    })
    .filter((x, i, all) => all.findIndex((y) => y.at === x.at) === i);
  return { classes, items, dirs, existing, seen, shares, snaps, markers };
}

/** What readNfs finds: every directory of the world at a class's depth, by its discovery rule. */
export function facts(b: ReturnType<typeof build>): NfsFacts {
  const classes = nfsClasses(b.classes);
  const dirs: NfsFacts['dirs'] = [];
  const archives: NfsFacts['archives'] = [];
  const ageOf = (at: string) => b.items.find((x) => x.at === at || x.at.startsWith(at + '/'))?.age ?? AGES[1] ?? 0;
  // The snapshot directories are on the share too: a class's claim scan walks past them (readNfs
  // skips .snapshots at its share's root only).
  const onShare = new Set(b.dirs);
  for (const x of b.snaps) {
    const segs = `${x.at}/tree`.split('/');
    for (let i = 2; i <= segs.length; i++) onShare.add(segs.slice(0, i).join('/'));
  }
  const snapshots: NfsFacts['snapshots'] = [];
  for (const c of classes) {
    const found = c.layout.proof ?? c.layout.could;
    for (const x of b.snaps) {
      if (x.share !== c.share || snapshots.some((y) => y.at === x.at)) continue;
      const dir = `.snapshots/${x.name}`;
      const name = x.name === '%61' ? 'a' : x.name;
      const changedAt = x.times ? NOW - x.age : 0;
      snapshots.push(
        x.complete
          ? {
              server: c.server,
              share: c.share,
              at: x.at,
              name,
              dir,
              complete: {
                server: c.server,
                share: c.share,
                name,
                sourceVolumeId: `${c.server}#${c.share.slice(1)}#src##`,
                createdMs: NOW - x.age,
                sizeBytes: 1,
                dataPath: `${dir}/tree`,
              },
            }
          : { server: c.server, share: c.share, at: x.at, name: x.name, dir, ours: x.name !== '%61', changedAt },
      );
    }
    for (const d of onShare) {
      if (!d.startsWith(c.share + '/')) continue;
      const rel = d.slice(c.share.length + 1);
      const segs = rel.split('/');
      if (segs.length !== found.length || segs[0] === '.snapshots') continue;
      if (segs[0]?.startsWith('archived-')) {
        if (!archives.some((a) => a.at === d))
          archives.push({
            server: c.server,
            share: c.share,
            path: rel,
            at: d,
            original: rel,
            archivedAt: NOW - ageOf(d),
            timeFrom: 'times',
          });
      } else if (segs.every((s, i) => found[i]?.test(s)) && !dirs.some((x) => x.at === d))
        dirs.push({ server: c.server, share: c.share, path: rel, at: d, changedAt: NOW - ageOf(d) });
    }
  }
  return {
    classes,
    addresses: ADDRESSES,
    dirs,
    archives,
    snapshots,
    upstreamSnapshots: [],
    restoreMarkers: classes.flatMap((c) =>
      b.markers
        .filter((m) => m.share === c.share)
        .map((m) => ({
          server: c.server,
          share: c.share,
          at: m.at,
          path: m.path,
          ...(!m.odd && { claim: m.claim }),
          filled: m.filled,
          type: m.shape === 'file' ? ('file' as const) : ('dir' as const),
          entries: m.shape === 'full' ? 1 : 0,
          ...(m.times && { changedAt: NOW - m.age }),
          target: m.odd ? ('unknown' as const) : m.exists ? ('dir' as const) : ('missing' as const),
        }))
        .filter((m, i, all) => all.findIndex((y) => y.at === m.at) === i),
    ),
    errors: [],
  };
}

const under = (a: string, b: string) => a === b || a.startsWith(b + '/');
const pvPaths = (pvs: readonly V1PersistentVolume[]) =>
  pvs.flatMap((pv) => {
    const a = pv.spec?.csi?.volumeAttributes;
    if (a?.server === OTHER_SERVER) return [];
    if (pv.spec?.nfs) return [absolute(pv.spec.nfs.path)];
    if (a) return [absolute(a.share ?? '', a.subDir ?? '')];
    const [, share = '', sub = ''] = (pv.spec?.csi?.volumeHandle ?? '').split('#');
    return [absolute(share, sub)];
  });

/** The document's definition, checked against the world's truth. */
export function violation(
  w: World,
  b: ReturnType<typeof build>,
  target: string,
  kind: 'claim' | 'archive' | 'partial-snapshot' | 'restore-marker',
): string | null {
  if (kind === 'restore-marker') {
    // Any view: a record holds no data; only its claim's state and its age decide.
    const m = b.markers.find((x) => x.at === target);
    if (!m) return `${target} is not a restore record`;
    if (m.odd) return `${target}: not a name the driver gives a restore record`;
    if (m.shape !== 'empty') return `${target} is not the empty record the driver makes (${m.shape})`;
    if (b.dirs.has(absolute(m.share, m.claim))) return `${target}: its claim ${m.claim} exists (may be partial)`;
    if (!m.times) return `${target}: no change times, a restore may be starting`;
    if (m.age < HOUR) return `${target} is within the grace period`;
    return null;
  }
  const snap = b.snaps.find((x) => x.at === target);
  if (kind === 'partial-snapshot') {
    // Any view: a partial copy is no claim's data, and a CreateSnapshot retry copies it again.
    if (!snap) return `${target} is not a snapshot directory`;
    if (snap.complete) return `${target} is a complete snapshot: only DeleteSnapshot removes it`;
    if (snap.name === '%61') return `${target}: not a name the driver gives a snapshot`;
    if (!snap.times) return `${target}: no change times, a copy may be running`;
    if (snap.age < HOUR) return `${target} is within the grace period`;
    return null;
  }
  const holds = b.snaps.find((x) => under(x.at, target));
  if (holds) return `${target} holds the snapshot ${holds.at}`;
  const record = b.markers.find((x) => under(x.at, target));
  if (record) return `${target} holds the restore record ${record.at}`;
  if (w.view === 'foreign') return `removed ${target} from a view without PVs`;
  const it = b.items.find((x) => x.at === target && x.kind === kind);
  if (!it) return `${target} is not a ${kind} any class made`;
  if (kind === 'claim') {
    const c = w.classes[it.cls ?? -1];
    if (c?.onDelete !== 'delete') return `${target}: its class says onDelete ${c?.onDelete ?? 'default'}`;
    if (!/\/pvc-[0-9a-f-]{36}(\/|$)/.test(target)) return `${target} carries no provisioned name`;
    if (it.age < HOUR) return `${target} is within the grace period`;
  }
  if (it.age > BIRTH_AGO && kind === 'claim') return `${target} predates the cluster`;
  const related = pvPaths(b.existing).find((p) => under(p, target) || under(target, p));
  if (related) return `${target}: a PV at ${related}`;
  const inside = b.items.find((x) => x !== it && under(x.at, target));
  if (inside) return `${target} holds ${inside.kind} ${inside.at}`;
  const share = b.shares.find((s) => b.classes.some((c) => c.parameters?.share === s) && under(s, target));
  if (share) return `${target} is (or holds) the share ${share}`;
  return null;
}
