// Day-2 worlds biased towards removals: the plain generator (day2-world.ts) makes a provable
// leftover in few worlds (it needs a gone claim of a class whose name proves it, onDelete delete,
// in the owner's view), so a short run through the real commands rarely reaches the code that
// removes. Each world here has at least one such candidate AND the traps that must keep
// everything else: data put there by hand, PVs spelled another way (parent share, localhost,
// in-tree, slashes) and a class on a nested share. Most views are the owner's; some are another
// or a rebuilt cluster's, where nothing may go.
import fc from 'fast-check';
import { AGES, type World, worldArb } from './day2-world.js';

const PROVING = [undefined, '${pvc.metadata.namespace}/${pv.metadata.name}', '${pv.metadata.name}'] as const;
const OTHER_SPELLINGS = ['parent-share', 'localhost', 'in-tree', 'slashes'] as const;
/** The share inside the proving class's one, for the nested class. */
const INNER = { '': '/k8s', '/k8s': '/k8s/talos' } as const;

export const leftoverWorldArb: fc.Arbitrary<World> = fc
  .record({
    base: worldArb,
    proving: fc.record({
      share: fc.constantFrom('', '/k8s'),
      template: fc.constantFrom(...PROVING),
      server: fc.constantFrom('127.0.0.1', 'localhost'),
    }),
    gone: fc.array(
      fc.record({ ns: fc.constantFrom('apps', 'media'), name: fc.constantFrom('data', 'app'), n: fc.nat(30) }),
      { minLength: 1, maxLength: 3 },
    ),
    spelled: fc.record({
      ns: fc.constantFrom('apps', 'media'),
      n: fc.nat(30),
      pv: fc.constantFrom(...OTHER_SPELLINGS),
    }),
    user: fc.constantFrom('photos/2023', 'backups/nightly', 'media/old-config', 'apps/data'),
    nestedTemplate: fc.constantFrom(undefined, '${pvc.metadata.namespace}/${pvc.metadata.name}', '${pv.metadata.name}'),
    nestedPolicy: fc.constantFrom('delete', 'retain', 'archive', undefined),
    /** How many of the plain world's classes join (on any share: they may overlap the others). */
    more: fc.constantFrom(0, 0, 1),
    /** Whether the plain world's PVs above directories (a whole share or folder) stay. */
    above: fc.constantFrom(false, false, true),
    view: fc.constantFrom('owner', 'owner', 'owner', 'owner', 'owner', 'owner', 'foreign', 'rebuilt'),
  })
  .map(({ base, proving, gone, spelled, user, nestedTemplate, nestedPolicy, more, above, view }): World => {
    const age = AGES[1] ?? 0; // old enough, younger than the cluster
    const classes: World['classes'] = [
      { ...proving, onDelete: 'delete' },
      { share: INNER[proving.share], template: nestedTemplate, onDelete: nestedPolicy, server: '127.0.0.1' },
      ...base.classes.slice(0, more),
    ];
    const claim = { archived: false, stamped: false, age };
    return {
      ...base,
      classes,
      claims: [
        ...gone.map((g) => ({ ...claim, ...g, cls: 0, pv: null })),
        { ...claim, cls: 0, ns: spelled.ns, name: 'config' as const, n: spelled.n + 31, pv: spelled.pv },
        ...base.claims,
      ].slice(0, 8),
      user: [{ share: proving.share, path: user }, ...base.user].slice(0, 4),
      parentPvs: above ? base.parentPvs : [],
      view,
    };
  });
