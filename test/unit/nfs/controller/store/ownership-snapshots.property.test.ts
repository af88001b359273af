// Property-based search for NFS ownership counterexamples in snapshots, restores and clones
// (docs/ownership-nfs.md, docs/snapshots.md), over the in-memory NAS (fake-nas.ts) with the real
// controller, gate and copy permits: generated layouts (v3 and v4, nested exports, a mounted
// disk inside a claim, symlinks inside claims pointing out of the share, a `.snapshots` that is
// a symlink or a file) × CreateSnapshot of any handle with hostile names (`..`, `../x`, `/`,
// `.restore-…`), DeleteSnapshot of hostile snapshot ids (names with `../`, other shares,
// csi-driver-nfs's form naming a claim), and CreateVolume from a snapshot or a volume. After
// every step: nothing was created, renamed or deleted outside `<share>/.snapshots/` and the one
// claim directory a restore or clone makes, nothing on another file system, nothing through a link.
//   PBT_SEED=<n> replays a run; PBT_RUNS=<n> runs longer (default 300).
import t from 'tap';
import fc from 'fast-check';
import { pino } from 'pino';
import { createNfsController } from '../../../../../src/nfs/controller/controller.js';
import { FakeNas, FakeNasStores } from '../fake-nas.js';
import { changedPaths, pbtParams } from './ownership-model.js';

const SERVER = 'nas';
const EXPORT = '/volume1/k8s-volumes';
const SHARE = `${EXPORT}/talos`;

interface Layout {
  speaks: '3' | '4';
  nested: boolean;
  mounted: boolean;
  snapshots: 'none' | 'dir' | 'symlink' | 'file';
  links: Array<'ns/pvc/out' | 'ns/pvc/data/up' | 'media/root'>;
}

const layout = fc.record<Layout>({
  speaks: fc.constantFrom('3', '4'),
  nested: fc.boolean(),
  mounted: fc.boolean(),
  snapshots: fc.constantFrom('none', 'dir', 'symlink', 'file'),
  links: fc.subarray(['ns/pvc/out', 'ns/pvc/data/up', 'media/root'] as const),
});

function build(l: Layout): FakeNas {
  const nas = new FakeNas(l.speaks === '4' ? '4' : '3,4', l.speaks);
  nas.addExport(EXPORT, 'fs1', true);
  for (const p of ['talos/ns/pvc/data', 'talos/media/app', 'photos/2023']) nas.put(`${EXPORT}/${p}`, 'dir');
  nas.put(`${EXPORT}/talos/ns/pvc/file.txt`, 'file');
  nas.put(`${EXPORT}/keep.txt`, 'file');
  if (l.nested) {
    nas.addExport(`${SHARE}/ns/pvc/nested`, 'fs2');
    nas.put(`${SHARE}/ns/pvc/nested/inner`, 'dir');
  }
  if (l.mounted) {
    nas.mount(`${SHARE}/media/app/disk`, 'fs4');
    nas.put(`${SHARE}/media/app/disk/f.txt`, 'file');
  }
  if (l.snapshots === 'dir') nas.put(`${SHARE}/.snapshots/old/tree/x`, 'dir');
  else if (l.snapshots !== 'none') nas.put(`${SHARE}/.snapshots`, l.snapshots);
  for (const s of l.links) nas.put(`${SHARE}/${s}`, 'symlink');
  return nas;
}

const SUBDIRS = [
  'ns/pvc',
  'media',
  'media/app',
  'ns/pvc/data',
  'ns/pvc/out',
  '.snapshots',
  '.snapshots/old/tree',
  'none',
];
const NAMES = ['snap-a', 'snap-b', '..', '../x', '../../keep', '.', '.restore-ns', 'tree', 'a/b', 'old'];
const SHARES = [SHARE, EXPORT, `${SHARE}/ns`, '/volume1', `${SHARE}/.snapshots`];

type Op =
  | { kind: 'snapshot'; subDir: string; name: string }
  | { kind: 'deleteSnapshot'; id: string }
  | { kind: 'restore'; snapshot: string; into: string }
  | { kind: 'clone'; subDir: string; into: string };

const snapshotIdArb = fc.oneof(
  fc
    .tuple(fc.constantFrom(...SHARES), fc.constantFrom(...NAMES))
    .map(([share, name]) => `nfs-snapshot/1#${SERVER}#${share.slice(1)}#${encodeURIComponent(name)}`),
  fc
    .tuple(fc.constantFrom(...SHARES), fc.constantFrom(...NAMES))
    .map(([share, name]) => `nfs-snapshot/1#${SERVER}#${share.slice(1)}#${name}`),
  // csi-driver-nfs's form: server#baseDir#name#name#src, naming a claim or a parent.
  fc
    .tuple(fc.constantFrom(...SUBDIRS, '..', ''), fc.constantFrom('ns', 'pvc', '..'))
    .map(([dir, name]) => `${SERVER}#${SHARE.slice(1)}/${dir}#${name}#${name}#src`),
);
// Half of the steps take the way that works (a claim's snapshot snap-a, restored from its id),
// so sequences reach restores; the rest is hostile.
const GOOD_ID = `nfs-snapshot/1#${SERVER}#${SHARE.slice(1)}#snap-a`;
const biased = <T>(good: T, rest: fc.Arbitrary<T>) =>
  fc.oneof({ weight: 1, arbitrary: fc.constant(good) }, { weight: 1, arbitrary: rest });
const intoArb = fc.constantFrom('pv-r', 'ns/pvc', '.snapshots/x', 'media', '../up', 'new/deep');
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant('snapshot' as const),
    subDir: biased('ns/pvc', fc.constantFrom(...SUBDIRS)),
    name: biased('snap-a', fc.constantFrom(...NAMES)),
  }),
  fc.record({ kind: fc.constant('deleteSnapshot' as const), id: snapshotIdArb }),
  fc.record({ kind: fc.constant('restore' as const), snapshot: biased(GOOD_ID, snapshotIdArb), into: intoArb }),
  fc.record({ kind: fc.constant('clone' as const), subDir: fc.constantFrom(...SUBDIRS), into: intoArb }),
);

const handle = (subDir: string) => `${SERVER}#${SHARE.slice(1)}#${subDir}#pv#retain`;
const cap = {
  mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' as const },
  accessType: 'mount' as const,
};

/** The one claim directory a restore or clone into `into` may make (CreateVolume's subDir). */
const createReq = (into: string, source: { snapshot?: { snapshotId: string }; volume?: { volumeId: string } }) => ({
  name: 'pv-r',
  capacityRange: { requiredBytes: '1', limitBytes: '0' },
  volumeCapabilities: [cap],
  parameters: { server: SERVER, share: SHARE, subDir: into, onDelete: 'delete' },
  secrets: {},
  volumeContentSource: source,
  accessibilityRequirements: null,
  mutableParameters: {},
});

/** Whether the step may change `path` (absolute on the server) on the share's file system. */
function mayChange(op: Op, path: string): boolean {
  if (path === `${SHARE}/.snapshots` || path.startsWith(`${SHARE}/.snapshots/`)) return true;
  if (op.kind !== 'restore' && op.kind !== 'clone') return false;
  const claim = `${SHARE}/${op.into}`;
  if (op.into.split('/').some((s) => s === '..' || s === '.' || s === '')) return false;
  // The claim, what is below it, and the parents made on the way to it.
  return path === claim || path.startsWith(`${claim}/`) || claim.startsWith(`${path}/`);
}

async function runOp(c: ReturnType<typeof createNfsController>, op: Op): Promise<string> {
  const ctx = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
  const kind = (p: Promise<unknown>) =>
    p.then(
      () => 'ok',
      (e: unknown) => (e instanceof Error ? e.constructor.name : 'thrown'),
    );
  switch (op.kind) {
    case 'snapshot':
      return kind(
        c.createSnapshot?.({ name: op.name, sourceVolumeId: handle(op.subDir), secrets: {}, parameters: {} }, ctx) ??
          Promise.reject(new Error('no createSnapshot')),
      );
    case 'deleteSnapshot':
      return kind(
        c.deleteSnapshot?.({ snapshotId: op.id, secrets: {} }, ctx) ?? Promise.reject(new Error('no deleteSnapshot')),
      );
    case 'restore':
      return kind(c.createVolume(createReq(op.into, { snapshot: { snapshotId: op.snapshot } }), ctx));
    case 'clone':
      return kind(c.createVolume(createReq(op.into, { volume: { volumeId: handle(op.subDir) } }), ctx));
  }
}

t.test('no snapshot, restore or clone changes anything outside .snapshots and its one claim', async (t) => {
  const { seed, numRuns } = pbtParams(300);
  let cases = 0;
  let stepsRun = 0;
  const outcomes = new Map<string, number>();
  const started = Date.now();
  const result = await fc.check(
    fc.asyncProperty(layout, fc.array(opArb, { minLength: 1, maxLength: 5 }), async (l, ops) => {
      cases++;
      const nas = build(l);
      const c = createNfsController({
        log: pino({ level: 'silent' }),
        callTimeoutMs: 1000,
        stores: new FakeNasStores(new Map([[SERVER, nas]])),
        now: () => new Date('2026-07-01T00:00:00Z'),
      });
      const shareFsid = nas.find(SHARE)?.fsid;
      for (const op of ops) {
        stepsRun++;
        const before = nas.picture();
        const outcome = await runOp(c, op);
        const key = `${op.kind}:${outcome}`;
        outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
        const bad = changedPaths(before, nas.picture())
          .filter((x) => x.fsid !== shareFsid || !mayChange(op, x.path) || throughLink(nas, x.path))
          .map((x) => `${JSON.stringify(op)} -> ${outcome}: ${x.type} ${x.path} (fsid ${x.fsid}) changed`);
        if (bad.length) throw new Error(bad.join('\n'));
      }
    }),
    { seed, numRuns },
  );
  const ok = (k: string) => outcomes.get(`${k}:ok`) ?? 0;
  t.comment(
    `NFS snapshot ownership property: ${cases} cases, ${stepsRun} steps (OK: snapshot ${ok('snapshot')}, deleteSnapshot ${ok('deleteSnapshot')}, restore ${ok('restore')}, clone ${ok('clone')}), seed ${seed} (replay: PBT_SEED=${seed}), ${Date.now() - started} ms`,
  );
  const why = result.errorInstance instanceof Error ? `\n${result.errorInstance.message}` : '';
  t.notOk(result.failed, (result.failed && `${fc.defaultReportMessage(result)}${why}`) || 'no counterexample');
});

/** A changed path whose parent chain (after the change) passes through a symlink: written through a link. */
function throughLink(nas: FakeNas, path: string): boolean {
  const parts = path.split('/').filter(Boolean);
  for (let i = 1; i < parts.length; i++)
    if (nas.find(`/${parts.slice(0, i).join('/')}`)?.type === 'symlink') return true;
  return false;
}

// The counterexample the search found first (seed 1): DeleteSnapshot of a csi-driver-nfs handle
// whose name is a parent of claims removed that directory with every claim in it.
t.test('DeleteSnapshot of a csi-driver-nfs handle removes its archive, never the claims it names', async (t) => {
  const nas = build({ speaks: '3', nested: false, mounted: false, snapshots: 'none', links: [] });
  nas.put(`${SHARE}/snapshot-1/pvc-src.tar.gz`, 'file');
  const c = createNfsController({
    log: pino({ level: 'silent' }),
    callTimeoutMs: 1000,
    stores: new FakeNasStores(new Map([[SERVER, nas]])),
    now: () => new Date('2026-07-01T00:00:00Z'),
  });
  t.equal(
    await runOp(c, { kind: 'deleteSnapshot', id: `${SERVER}#${SHARE.slice(1)}/#ns#ns#src` }),
    'ok',
    'no archive: nothing to do',
  );
  t.ok(nas.find(`${SHARE}/ns/pvc/file.txt`), 'the claim below the named directory is kept');
  const id = `${SERVER}#${SHARE.slice(1)}#snapshot-1#snapshot-1#pvc-src`;
  t.equal(await runOp(c, { kind: 'deleteSnapshot', id }), 'ok');
  t.notOk(nas.find(`${SHARE}/snapshot-1`), "csi-driver-nfs's snapshot directory and archive are removed");
});
