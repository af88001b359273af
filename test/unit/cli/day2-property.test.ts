// Property-based search for the day-2 ownership rule (docs/ownership-day2.md): generated
// worlds — NFS classes of different depths on nested shares, spelled on two names of one
// server, claims each class really made (live, Released/Retain with a PV, or gone), data put
// there by hand, archives, PVs in every spelling (dynamic handle, static on the parent share,
// localhost, in-tree, a different server), Proxmox disks of the driver's scheme and others —
// seen through the owner cluster's view, another cluster's (no PVs), or a rebuilt cluster's
// (everything older than it). The oracle knows the truth of each world and checks that
// everything `report --fix --yes` and `archives prune --yes` would remove is a provable leftover
// by the document's definition; it is written from the document, not from the rule's code.
// PBT_SEED and PBT_RUNS replay or lengthen a run; both are printed.
import fc from 'fast-check';
import t from 'tap';
import { proxmoxFindings } from '../../../src/cli/report/findings.js';
import { archiveVerdicts, nfsFindings } from '../../../src/cli/report/nfs-findings.js';
import { absolute } from '../../../src/cli/report/ownership.js';
import { archivePath } from '../../../src/nfs/controller/policy.js';
import type { V1PersistentVolume } from '../../../src/k8s/index.js';
import type { NfsFacts } from '../../../src/cli/report/facts.js';
import { nfsClasses } from '../../../src/cli/report/facts.js';
import {
  ADDRESSES,
  clusterFacts,
  dynamicNfsPv,
  HOUR,
  inTreeNfsPv,
  kube,
  NOW,
  nfsClass,
  proxmoxPv,
  rules,
  staticNfsPv,
  uid,
} from './day2-fixtures.js';

const seed = Number(process.env.PBT_SEED ?? Date.now() % 2 ** 31);
const runs = Number(process.env.PBT_RUNS ?? 1000);
t.comment(`day-2 property search: PBT_SEED=${seed} PBT_RUNS=${runs}`);

const SHARES = ['/v', '/v/k8s', '/v/k8s/talos'] as const;
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
const BIRTH_AGO = 30 * 24 * HOUR;
const AGES = [5 * 60e3, 48 * HOUR, 40 * 24 * HOUR]; // young (in grace), old, older than the cluster
const SPELLINGS = ['dynamic', 'parent-share', 'localhost', 'in-tree', 'slashes', 'other-server'] as const;
type Spelling = (typeof SPELLINGS)[number];

const classArb = fc.record({
  share: fc.constantFrom(...SHARES),
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
const worldArb = fc.record({
  classes: fc.array(classArb, { minLength: 1, maxLength: 3 }),
  claims: fc.array(claimArb, { maxLength: 8 }),
  user: fc.array(fc.record({ share: fc.constantFrom(...SHARES), path: fc.constantFrom(...USER_DATA) }), {
    maxLength: 4,
  }),
  /** PVs made by hand on a directory of the world or one above it (a recovery mount). */
  parentPvs: fc.array(fc.record({ of: fc.nat(12), up: fc.nat(2), spelling: fc.constantFrom(...SPELLINGS) }), {
    maxLength: 2,
  }),
  view: fc.constantFrom('owner', 'owner', 'owner', 'foreign', 'rebuilt'),
});
type World = typeof worldArb extends fc.Arbitrary<infer W> ? W : never;

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
function pvFor(name: string, at: string, spelling: Spelling, classShare: string | undefined): V1PersistentVolume {
  const rel = (base: string) => at.slice(base.length).replace(/^\//, '');
  switch (spelling) {
    case 'dynamic':
      return classShare && at.startsWith(classShare + '/')
        ? dynamicNfsPv(name, '127.0.0.1', classShare, rel(classShare))
        : staticNfsPv(name, '127.0.0.1', '/v', rel('/v'));
    case 'parent-share':
      return staticNfsPv(name, '127.0.0.1', '/v', rel('/v'));
    case 'localhost':
      return staticNfsPv(name, 'localhost', '/v/k8s', at.startsWith('/v/k8s/') ? rel('/v/k8s') : '../' + rel('/v'));
    case 'in-tree':
      return inTreeNfsPv(name, 'localhost', at);
    case 'slashes':
      return staticNfsPv(name, '127.0.0.1', '//v/', `/${rel('/v')}/.`);
    case 'other-server':
      return staticNfsPv(name, 'nas', '/v', rel('/v'));
  }
}

/** The world as it is, the PVs that exist, and what the view shows. */
function build(w: World) {
  const classes = w.classes.map((c, i) => nfsClass(`c${i}`, c.share, c.template, c.onDelete, c.server));
  const items: Item[] = [];
  const truePvs: V1PersistentVolume[] = [];
  const dirs = new Set<string>();
  const add = (it: Item) => {
    if (items.some((x) => x.at === it.at)) return;
    items.push(it);
    const segs = it.at.split('/');
    for (let i = 2; i <= segs.length; i++) dirs.add(segs.slice(0, i).join('/'));
  };
  for (const s of SHARES) dirs.add(s);
  for (const c of w.claims) {
    const cls = w.classes[c.cls % w.classes.length];
    if (!cls) continue;
    const pvName = `pvc-${uid(c.n + 1)}`;
    const sub = expand(cls.template, c.ns, c.name, pvName);
    const rel = c.archived ? archivePath(sub) + (c.stamped ? '-20250101T000000Z' : '') : sub;
    const at = absolute(cls.share, rel);
    add({ at, kind: c.archived ? 'archive' : 'claim', cls: c.cls % w.classes.length, age: c.age });
    if (c.pv !== null) truePvs.push(pvFor(pvName + (c.archived ? '-recover' : ''), at, c.pv, cls.share));
  }
  for (const u of w.user) add({ at: absolute(u.share, u.path), kind: 'user', age: AGES[1] ?? 0 });
  w.parentPvs.forEach((p, i) => {
    const it = items[p.of % Math.max(1, items.length)];
    if (!it) return;
    const at = it.at
      .split('/')
      .slice(0, Math.max(2, it.at.split('/').length - p.up))
      .join('/');
    truePvs.push(pvFor(`static-${i}`, at, p.spelling, undefined));
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
  return { classes, items, dirs, existing, seen };
}

/** What readNfs finds: every directory of the world at a class's depth, by its discovery rule. */
function facts(b: ReturnType<typeof build>): NfsFacts {
  const classes = nfsClasses(b.classes);
  const dirs: NfsFacts['dirs'] = [];
  const archives: NfsFacts['archives'] = [];
  const ageOf = (at: string) => b.items.find((x) => x.at === at || x.at.startsWith(at + '/'))?.age ?? AGES[1] ?? 0;
  for (const c of classes) {
    const found = c.layout.proof ?? c.layout.could;
    for (const d of b.dirs) {
      if (!d.startsWith(c.share + '/')) continue;
      const rel = d.slice(c.share.length + 1);
      const segs = rel.split('/');
      if (segs.length !== found.length) continue;
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
  return { classes, addresses: ADDRESSES, dirs, archives, errors: [] };
}

const under = (a: string, b: string) => a === b || a.startsWith(b + '/');
const pvPaths = (pvs: readonly V1PersistentVolume[]) =>
  pvs.flatMap((pv) => {
    const a = pv.spec?.csi?.volumeAttributes;
    if (a?.server === 'nas') return [];
    if (pv.spec?.nfs) return [absolute(pv.spec.nfs.path)];
    if (a) return [absolute(a.share ?? '', a.subDir ?? '')];
    const [, share = '', sub = ''] = (pv.spec?.csi?.volumeHandle ?? '').split('#');
    return [absolute(share, sub)];
  });

/** The document's definition, checked against the world's truth. */
function violation(w: World, b: ReturnType<typeof build>, target: string, kind: 'claim' | 'archive'): string | null {
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
  const root = SHARES.find((s) => b.classes.some((c) => c.parameters?.share === s) && under(s, target));
  if (root) return `${target} is (or holds) the share ${root}`;
  return null;
}

t.test('report --fix and archives prune remove only provable leftovers', (t) => {
  let removals = 0;
  let prunes = 0;
  fc.assert(
    fc.property(worldArb, (w) => {
      const b = build(w);
      const f = facts(b);
      const k = kube({ pvs: b.seen, birth: NOW - BIRTH_AGO });
      for (const finding of nfsFindings(f, k, rules)) {
        const a = finding.action;
        if (a?.type !== 'remove-dir') continue;
        removals++;
        const v = violation(w, b, absolute(a.share, a.path), 'claim');
        if (v) throw new Error(v);
      }
      for (const v of archiveVerdicts(f, b.seen)) {
        if (v.kept) continue;
        prunes++;
        const why = violation(w, b, absolute(v.remove.share, v.remove.path), 'archive');
        if (why) throw new Error(why);
      }
    }),
    { seed, numRuns: runs },
  );
  t.comment(`${runs} worlds: ${removals} directory removals and ${prunes} archive prunes checked`);
  t.ok(removals > 0 && prunes > 0, 'the search reaches removals, not only refusals');
  t.end();
});

t.test('Proxmox: only disks of the driver that no PV and no VM names, seen by the owner', (t) => {
  let frees = 0;
  const diskArb = fc.record({
    n: fc.nat(20),
    scheme: fc.constantFrom('pvc', 'pvc', 'disk', 'other-vm'),
    pv: fc.boolean(),
    attached: fc.constantFrom(false, false, true),
    age: fc.constantFrom(...AGES),
  });
  fc.assert(
    fc.property(fc.array(diskArb, { maxLength: 6 }), fc.constantFrom('owner', 'foreign', 'rebuilt'), (ds, view) => {
      const name = (d: (typeof ds)[number]) =>
        d.scheme === 'pvc'
          ? `vm-9999-pvc-${uid(d.n)}`
          : d.scheme === 'disk'
            ? `vm-9999-disk-${d.n}`
            : `vm-101-pvc-${uid(d.n)}`;
      const unique = ds.filter((d, i) => ds.findIndex((x) => name(x) === name(d)) === i);
      const pvs = unique.filter((d) => d.pv).map((d) => proxmoxPv(`pv-${d.n}-${d.scheme}`, name(d)));
      const seen = view === 'foreign' ? [] : view === 'rebuilt' ? pvs.slice(1) : pvs;
      const scan = unique
        .filter((d) => d.attached)
        .map((d, i) => ({
          vm: { type: 'qemu' as const, vmid: 111 + i, name: `w${i}`, node: 'hyper1' },
          entries: [{ key: 'scsi1', value: `local-lvm:${name(d)},wwn=0x5056432d49443031` }],
        }));
      const cf = clusterFacts(
        unique.filter((d) => d.scheme !== 'other-vm').map((d) => ({ disk: name(d), age: d.age })),
        scan,
      );
      for (const f of proxmoxFindings(cf, kube({ pvs: seen, birth: NOW - BIRTH_AGO }), rules)) {
        if (f.action?.type !== 'delete-volume') continue;
        frees++;
        const d = unique.find((x) => f.action?.type === 'delete-volume' && f.action.volumeId.endsWith('/' + name(x)));
        if (!d) throw new Error(`freed ${f.action.volumeId}, not in the world`);
        if (view === 'foreign') throw new Error(`freed ${name(d)} from a view without PVs`);
        if (d.scheme !== 'pvc') throw new Error(`freed ${name(d)}: not a provisioned name`);
        // A rebuilt cluster's PVs are what it shows (the old cluster is gone); another's exist.
        const existing = view === 'rebuilt' ? seen : pvs;
        if (existing.some((pv) => pv.spec?.csi?.volumeHandle.endsWith('/' + name(d))))
          throw new Error(`freed ${name(d)}: a PV names it`);
        if (d.attached) throw new Error(`freed ${name(d)}: on a VM`);
        if (d.age < HOUR || d.age > BIRTH_AGO) throw new Error(`freed ${name(d)}: age ${d.age}`);
      }
    }),
    { seed, numRuns: runs },
  );
  t.comment(`${runs} clusters: ${frees} frees checked`);
  t.ok(frees > 0, 'the search reaches frees');
  t.end();
});
