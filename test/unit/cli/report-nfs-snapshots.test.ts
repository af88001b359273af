// NFS snapshots in `report`, the findings metrics and `archives` (over the fake NAS behind the
// real ownership gate): a complete snapshot is information and nothing may remove it but
// DeleteSnapshot (archives prune judges archived-* trees only); a partial one (no completion
// record) older than the grace period, with nothing below it changed since, is a leftover that
// `report --fix` removes through the gate, judged again right before; a young one, one whose
// name the driver does not make and the restore records are left alone. Before snapshots were
// known here, report listed none of them and a partial copy stayed until removed by hand.
import t from 'tap';
import { pino } from 'pino';
import type { KubeApi, V1StorageClass } from '../../../src/k8s/index.js';
import { nfsClasses, readNfs, type KubeFacts } from '../../../src/cli/report/facts.js';
import { runAction } from '../../../src/cli/report/fix.js';
import type { Action } from '../../../src/cli/report/findings.js';
import { archiveVerdicts, nfsFindings } from '../../../src/cli/report/nfs-findings.js';
import { collect } from '../../../src/metrics/findings-collect.js';
import { FakeNas, FakeNasStores, type FNode } from '../nfs/controller/fake-nas.js';

const SERVER = '127.0.0.1';
const SHARE = '/srv/k8s';
const NOW = Date.UTC(2026, 11, 2, 12);
const HOUR = 3_600_000;
const SOURCE = `${SERVER}#srv/k8s#pvc-src##`;
const log = pino({ level: 'silent' });

function touchAll(n: FNode, ms: number): void {
  n.changedMs = ms;
  for (const c of n.children.values()) touchAll(c, ms);
}

function world() {
  const nas = new FakeNas('3');
  nas.addExport(SHARE, 'fs1');
  const at = (p: string) => `${SHARE}/${p}`;
  nas.put(at('pvc-src/data'));
  nas.put(at('.snapshots/snap-done/tree/data'));
  nas.put(at(`.snapshots/snap-done/v1,${NOW - 48 * HOUR},4096,${encodeURIComponent(SOURCE)}`));
  nas.put(at('.snapshots/snap-half/tree/data/deep'));
  nas.put(at('.snapshots/snap-half/tree/link'), 'symlink');
  nas.put(at('.snapshots/snap-young/tree/data/deep'));
  nas.put(at('.snapshots/snap-mnt/tree/m/file'), 'file');
  nas.put(at('.snapshots/%61/tree'));
  nas.put(at('.snapshots/.restore-pvc-r'));
  nas.put(at('.snapshots/snap-link'), 'symlink');
  nas.put(at('archived-pvc-old-20200101T000000Z/data'));
  touchAll(nas.find(SHARE) as FNode, NOW - 3 * HOUR);
  // A copy is running into snap-young: only one entry deep below it changed a minute ago.
  nas.touch(at('.snapshots/snap-young/tree/data/deep'), NOW - 60_000);
  // Another file system inside a partial copy: the gate's boundary walk refuses its removal.
  nas.addExport(at('.snapshots/snap-mnt/tree/m'), 'fs2');
  nas.put(at('.snapshots/snap-mnt/tree/m/file'), 'file');
  const stores = new FakeNasStores(new Map([[SERVER, nas]]));
  const sc: V1StorageClass = {
    metadata: { name: 'nfs' },
    provisioner: 'nfs.csi.k8s.io',
    parameters: { server: SERVER, share: SHARE, onDelete: 'archive' },
  };
  const k: KubeFacts = { pvs: [], pvcs: [], attachments: [], classes: [sc], birth: NOW - 30 * 24 * HOUR };
  return { nas, stores, k, at };
}

const signal = () => AbortSignal.timeout(5_000);

t.test(
  'report: complete snapshots are information, old partial ones leftovers; archives prune cannot reach either',
  async (t) => {
    const { stores, k } = world();
    const facts = await readNfs(nfsClasses(k.classes), k.pvs, stores, { signal: signal(), sizes: true });
    t.same(
      facts.snapshots.map((s) => [s.dir, s.complete ? 'complete' : 'partial']),
      [
        ['.snapshots/%61', 'partial'],
        ['.snapshots/snap-done', 'complete'],
        ['.snapshots/snap-half', 'partial'],
        ['.snapshots/snap-mnt', 'partial'],
        ['.snapshots/snap-young', 'partial'],
      ],
      'every snapshot directory, restore records and symlinks aside',
    );
    t.same(
      facts.archives.map((a) => a.path),
      ['archived-pvc-old-20200101T000000Z'],
      'archives are archived-* trees only: no snapshot is one',
    );
    t.notOk(
      archiveVerdicts(facts, k.pvs).some((v) => v.archive.path.startsWith('.snapshots')),
      'prune (which removes only judged archives) has no snapshot to judge',
    );
    const rules = { controllerVmId: 9999, graceMs: HOUR, now: NOW };
    const found = nfsFindings(facts, k, rules).filter((f) => f.kind.endsWith('snapshot'));
    const by = new Map(found.map((f) => [f.what, f]));
    t.match(by.get('.snapshots/snap-done'), {
      kind: 'nfs-snapshot',
      detail: /snapshot snap-done of pvc-src \(complete/,
      sizeBytes: 4096,
      ageMs: 48 * HOUR,
    });
    t.notOk(by.get('.snapshots/snap-done')?.action, 'a complete snapshot has no action');
    t.match(by.get('.snapshots/snap-half'), {
      kind: 'partial-snapshot',
      ageMs: 3 * HOUR,
      action: { type: 'remove-partial-snapshot', server: SERVER, share: SHARE, dir: '.snapshots/snap-half' },
    });
    t.match(by.get('.snapshots/snap-young'), { kind: 'partial-snapshot', kept: /grace period/ });
    t.notOk(by.get('.snapshots/snap-young')?.action);
    t.match(by.get('.snapshots/%61'), { kind: 'partial-snapshot', kept: /not one the driver gives/ });

    // The metrics run report's own findings: the same kinds and actions.
    const m = await collect({ kube: async () => k, stores, log, now: NOW, graceMs: HOUR, count: () => {} });
    t.same(
      m.findings.filter((f) => f.kind.endsWith('snapshot')).map((f) => [f.kind, f.what, f.action?.type]),
      found.map((f) => [f.kind, f.what, f.action?.type]),
    );
  },
);

t.test('report --fix removes a partial snapshot through the gate, judged again; never a complete one', async (t) => {
  const { nas, stores, k, at } = world();
  const ctx = {
    core: {} as never,
    kube: { listPersistentVolumes: () => Promise.resolve([]) } as unknown as KubeApi,
    stores,
    nfs: { classes: nfsClasses(k.classes), addresses: new Map([[SERVER, [SERVER]]]) },
    log,
    signal: signal(),
  };
  const act = (dir: string, changedAt = NOW - 3 * HOUR): Action => ({
    type: 'remove-partial-snapshot',
    server: SERVER,
    share: SHARE,
    dir,
    changedAt,
  });
  t.equal(await runAction(ctx, act('.snapshots/snap-half')), 'removed');
  t.notOk(nas.find(at('.snapshots/snap-half')), 'the partial copy is gone');
  t.ok(nas.find(at('pvc-src/data')) && nas.find(at('.snapshots/snap-done/tree/data')), 'nothing else');
  t.equal(await runAction(ctx, act('.snapshots/snap-half')), 'already gone', 'a retry');

  await t.rejects(runAction(ctx, act('.snapshots/snap-done')), /complete now/, 'finished since the listing');
  t.ok(nas.find(at('.snapshots/snap-done/tree/data')));
  await t.rejects(runAction(ctx, act('.snapshots/snap-young')), /changed since the listing/);
  t.ok(nas.find(at('.snapshots/snap-young/tree/data/deep')));
  for (const dir of [
    '.snapshots/.restore-pvc-r',
    '.snapshots',
    'pvc-src',
    '.snapshots/snap-done/tree',
    '.snapshots/../pvc-src',
  ])
    await t.rejects(runAction(ctx, act(dir)), /not a snapshot directory|changed|complete/, `refused: ${dir}`);
  t.ok(nas.find(at('pvc-src/data')) && nas.find(at('.snapshots/.restore-pvc-r')));
  await t.rejects(runAction(ctx, act('.snapshots/snap-mnt')), /.+/, 'another file system inside: the gate refuses');
  t.ok(nas.find(at('.snapshots/snap-mnt/tree/m/file')), 'nothing of the other file system removed');
});

t.test('a directory under .snapshots/ that a PV uses is never a partial snapshot to remove', async (t) => {
  const { nas, stores, k, at } = world();
  // A claim of a class whose subDir named the store (refused now; older PVs stay), a static PV
  // pointing into a partial copy (legacy handle), and a PV of the whole share (which does not hold it).
  nas.put(at('.snapshots/pvc-claim/app-data'));
  touchAll(nas.find(at('.snapshots/pvc-claim')) as FNode, NOW - 3 * HOUR);
  const pv = (name: string, volumeHandle: string, volumeAttributes?: Record<string, string>) => ({
    metadata: { name },
    spec: { csi: { driver: 'nfs.csi.k8s.io', volumeHandle, ...(volumeAttributes && { volumeAttributes }) } },
    status: { phase: 'Bound' },
  });
  const pvs = [
    pv('pvc-claim', `${SERVER}#srv/k8s#.snapshots/pvc-claim#pvc-claim#`),
    pv('static-half', 'static-half', { server: SERVER, share: SHARE, subDir: '.snapshots/snap-half/tree/data' }),
    pv('whole-share', `${SERVER}/srv/k8s`, { server: SERVER, share: SHARE }),
  ];
  const kk = { ...k, pvs: pvs as never };
  const facts = await readNfs(nfsClasses(kk.classes), kk.pvs, stores, { signal: signal(), sizes: false });
  const rules = { controllerVmId: 9999, graceMs: HOUR, now: NOW };
  const by = new Map(nfsFindings(facts, kk, rules).map((f) => [f.what, f]));
  t.match(by.get('.snapshots/pvc-claim'), { kind: 'partial-snapshot', kept: /PV pvc-claim uses it/ });
  t.notOk(by.get('.snapshots/pvc-claim')?.action, 'the claim under .snapshots/ is kept');
  t.match(by.get('.snapshots/snap-half'), { kept: /PV static-half uses it/ });
  t.notOk(by.get('.snapshots/snap-half')?.action, 'the copy a static PV points into is kept');
  t.ok(by.get('.snapshots/snap-mnt')?.action ?? by.get('.snapshots/snap-mnt')?.kept, 'judged as before');
  t.notMatch(by.get('.snapshots/%61')?.kept ?? '', /whole-share/, 'a PV of the whole share holds no copy');

  // --fix judges again on its own list of PVs: one made since the report keeps the copy.
  const ctx = {
    core: {} as never,
    kube: { listPersistentVolumes: () => Promise.resolve(pvs) } as unknown as KubeApi,
    stores,
    nfs: { classes: nfsClasses(k.classes), addresses: new Map([[SERVER, [SERVER]]]) },
    log,
    signal: signal(),
  };
  const act = (dir: string): Action => ({
    type: 'remove-partial-snapshot',
    server: SERVER,
    share: SHARE,
    dir,
    changedAt: NOW - 3 * HOUR,
  });
  await t.rejects(runAction(ctx, act('.snapshots/pvc-claim')), /left alone: PV pvc-claim now uses it/);
  await t.rejects(runAction(ctx, act('.snapshots/snap-half')), /left alone: PV static-half now uses it/);
  t.ok(nas.find(at('.snapshots/pvc-claim/app-data')) && nas.find(at('.snapshots/snap-half/tree/data/deep')));
});
