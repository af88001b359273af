// Property-based search for the day-2 ownership rule (docs/ownership-day2.md) over the pure
// decision layer: generated worlds (day2-world.ts) × what `report --fix --yes` and
// `archives prune --yes` would remove, each removal checked by the oracle; and Proxmox disks of
// the driver's scheme and others, attached or not, with or without PVs, through the owner's,
// another cluster's and a rebuilt cluster's view. PBT_SEED and PBT_RUNS replay or lengthen a
// run; both are printed.
import fc from 'fast-check';
import t, { type Test } from 'tap';
import { proxmoxFindings } from '../../../src/cli/report/findings.js';
import { archiveVerdicts, nfsFindings } from '../../../src/cli/report/nfs-findings.js';
import { absolute } from '../../../src/cli/report/ownership.js';
import { clusterFacts, HOUR, kube, NOW, proxmoxPv, rules, uid } from './day2-fixtures.js';
import { AGES, BIRTH_AGO, build, facts, violation, type World, worldArb } from './day2-world.js';
import { leftoverWorldArb } from './day2-property-worlds.js';
import type { HelperFact } from '../../../src/cli/report/helper-vms.js';
import { COPY_VM_NAMES, formatRecord } from '../../../src/proxmox/controller/safety/copy-vms.js';

const seed =
  process.env.PBT_SEED && process.env.PBT_SEED !== 'random' ? Number(process.env.PBT_SEED) : Date.now() % 2 ** 31;
const runs = Number(process.env.PBT_RUNS ?? 1000);
t.comment(`day-2 property search: PBT_SEED=${seed} PBT_RUNS=${runs}`);

/** Runs the NFS rule over `arb`'s worlds; every removal and prune is checked by the oracle. */
function searchNfs(t: Test, arb: fc.Arbitrary<World>, label: string) {
  let cases = 0;
  let steps = 0;
  let removals = 0;
  let snapshotRemovals = 0;
  let markerRemovals = 0;
  let prunes = 0;
  let reaching = 0;
  const started = Date.now();
  fc.assert(
    fc.property(arb, (w) => {
      cases++;
      const b = build(w);
      const f = facts(b);
      const k = kube({ pvs: b.seen, birth: NOW - BIRTH_AGO });
      const before = removals + prunes;
      steps++; // report --fix
      for (const finding of nfsFindings(f, k, rules)) {
        const a = finding.action;
        if (a?.type === 'remove-restore-marker') {
          markerRemovals++;
          const v = violation(w, b, absolute(a.share, a.marker), 'restore-marker');
          if (v) throw new Error(v);
        }
        if (a?.type === 'remove-partial-snapshot') {
          snapshotRemovals++;
          const v = violation(w, b, absolute(a.share, a.dir), 'partial-snapshot');
          if (v) throw new Error(v);
        }
        if (a?.type !== 'remove-dir') continue;
        removals++;
        const v = violation(w, b, absolute(a.share, a.path), 'claim');
        if (v) throw new Error(v);
      }
      steps++; // archives prune
      for (const v of archiveVerdicts(f, b.seen)) {
        if (v.kept) continue;
        prunes++;
        const why = violation(w, b, absolute(v.remove.share, v.remove.path), 'archive');
        if (why) throw new Error(why);
      }
      if (removals + prunes > before) reaching++;
    }),
    { seed, numRuns: runs },
  );
  t.comment(
    `day-2 ${label}: ${cases} cases, ${steps} steps, ${removals} directory removals, ${snapshotRemovals} partial snapshot removals, ${markerRemovals} restore record removals and ${prunes} archive prunes ` +
      `checked (${reaching} worlds with one), seed ${seed} (PBT_SEED=${seed} PBT_RUNS=${runs}), ${Date.now() - started} ms`,
  );
  return { removals, snapshotRemovals, markerRemovals, prunes, reaching, cases };
}

t.test('report --fix and archives prune remove only provable leftovers', (t) => {
  const r = searchNfs(t, worldArb, 'plain worlds');
  t.ok(r.removals > 0 && r.prunes > 0, 'the search reaches removals, not only refusals');
  t.ok(r.snapshotRemovals > 0, 'and removals of partial snapshots');
  t.ok(r.markerRemovals > 0, 'and removals of restore records');
  t.end();
});

t.test('worlds biased to hold leftovers and traps: removals in most, still only provable ones', (t) => {
  const r = searchNfs(t, leftoverWorldArb, 'leftover worlds');
  t.ok(r.reaching > r.cases / 2, `most worlds reach a removal (${r.reaching} of ${r.cases})`);
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
  t.comment(`day-2 Proxmox: ${runs} cases, ${runs} steps, ${frees} frees checked, seed ${seed} (PBT_SEED=${seed})`);
  t.ok(frees > 0, 'the search reaches frees');
  t.end();
});

t.test('Proxmox helper VMs: only provable leftovers, and restored volumes only as orphans, seen by the owner', (t) => {
  let removals = 0;
  let frees = 0;
  const helperArb = fc.record({
    role: fc.constantFrom('copy' as const, 'snapshot' as const, 'volume' as const, 'volume' as const),
    age: fc.constantFrom(60e3, 20 * 60e3, HOUR, 48 * HOUR),
    diskAge: fc.constantFrom(...AGES),
    locked: fc.constantFrom(false, false, false, true),
    running: fc.constantFrom(false, false, false, true),
    holds: fc.constantFrom(false, false, true),
    disk: fc.constantFrom(true, true, false),
    marker: fc.boolean(),
    listed: fc.constantFrom(true, true, true, false),
    snapshot: fc.boolean(),
    pv: fc.constantFrom(false, false, true),
    attached: fc.constantFrom(false, false, true),
  });
  fc.assert(
    fc.property(fc.array(helperArb, { maxLength: 4 }), fc.constantFrom('owner', 'foreign', 'rebuilt'), (hs, view) => {
      const vmid = (i: number) => 800_000_100 + i;
      const clone = (i: number) => `local-lvm:vm-${vmid(i)}-disk-0`;
      const helpers: HelperFact[] = hs.map((h, i) => {
        const record = { role: h.role, controller: 9999, name: `pvc-${i}`, source: 's', created: (NOW - h.age) / 1000 };
        const entries = [
          { key: 'description', value: formatRecord(record) },
          ...(h.holds ? [{ key: 'scsi0', value: `${clone(i)},size=1G` }] : []),
          ...(h.locked ? [{ key: 'lock', value: 'clone' }] : []),
        ];
        const owned = [...(h.disk ? [clone(i)] : []), ...(h.marker ? [`${clone(i)}+vac1-b0`] : [])].map((volid) => ({
          storage: 'local-lvm',
          disk: volid.slice(10),
          volid,
          size: 1,
          createdAt: NOW - h.diskAge,
        }));
        return {
          vm: {
            type: 'qemu',
            vmid: vmid(i),
            name: COPY_VM_NAMES[h.role],
            node: 'hyper1',
            status: h.running ? 'running' : 'stopped',
          },
          record,
          entries,
          snapshots: h.snapshot ? ['csi0'] : [],
          owned: h.listed ? owned : undefined,
        };
      });
      const pvs = [
        proxmoxPv('pv-other', `vm-9999-pvc-${uid(99)}`),
        ...hs.flatMap((h, i) => (h.pv ? [proxmoxPv(`pv-${i}`, clone(i).slice(10))] : [])),
      ];
      const seen = view === 'foreign' ? [] : view === 'rebuilt' ? pvs.slice(1) : pvs;
      const scan = hs.flatMap((h, i) =>
        h.attached
          ? [
              {
                vm: { type: 'qemu' as const, vmid: 111 + i, name: `w${i}`, node: 'hyper1' },
                entries: [{ key: 'scsi1', value: `${clone(i)},wwn=0x5056432d49443031` }],
              },
            ]
          : [],
      );
      const cf = { ...clusterFacts([{ disk: `vm-9999-pvc-${uid(99)}`, age: 48 * HOUR }], scan), helpers };
      for (const f of proxmoxFindings(cf, kube({ pvs: seen, birth: NOW - BIRTH_AGO }), rules)) {
        const a = f.action;
        if (a?.type === 'remove-helper') {
          removals++;
          const i = a.vmid - vmid(0);
          const h = hs[i];
          if (!h) throw new Error(`removes VM ${a.vmid}, not in the world`);
          if (h.locked || h.running) throw new Error(`removes ${h.role} VM ${a.vmid}: locked or running`);
          if (h.role === 'copy' && h.age < 30 * 60e3) throw new Error(`removes a copy VM ${h.age} ms old`);
          if (h.role === 'snapshot' && (!h.listed || (h.holds && h.disk)))
            throw new Error(`removes snapshot VM ${a.vmid}, which may hold its clone`);
          if (h.role === 'volume' && (!h.listed || h.holds || h.disk))
            throw new Error(`removes volume VM ${a.vmid}, which may own its volume`);
        } else if (a?.type === 'delete-volume' && a.volumeId.includes('/vm-8')) {
          frees++;
          const i = hs.findIndex((_, j) => a.volumeId.endsWith('/' + clone(j).slice(10)));
          const h = hs[i];
          if (!h) throw new Error(`frees ${a.volumeId}, not in the world`);
          if (h.role !== 'volume' || h.holds || !h.disk || !h.listed)
            throw new Error(`frees ${a.volumeId}: no restored volume`);
          if (view === 'foreign') throw new Error(`frees ${a.volumeId} from a view without PVs`);
          const existing = view === 'rebuilt' ? seen : pvs;
          if (existing.some((pv) => pv.spec?.csi?.volumeHandle.endsWith('/' + clone(i).slice(10))))
            throw new Error(`frees ${a.volumeId}: a PV names it`);
          if (h.attached) throw new Error(`frees ${a.volumeId}: on a VM`);
          if (h.diskAge < HOUR || h.diskAge > BIRTH_AGO) throw new Error(`frees ${a.volumeId}: age ${h.diskAge}`);
        }
      }
    }),
    { seed, numRuns: runs },
  );
  t.comment(`day-2 Proxmox helper VMs: ${runs} cases, ${removals} removals and ${frees} frees checked, seed ${seed}`);
  t.ok(removals > 0 && frees > 0, 'the search reaches removals and frees');
  t.end();
});
