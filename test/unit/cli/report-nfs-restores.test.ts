// `report` and `report --fix` over what restores leave on an NFS share (the fake NAS behind the
// real ownership gate): csi-driver-nfs's own snapshot archives (<share>/<name>/<src>.tar.gz or
// .tar) are listed as information with the handle this driver restores them from, never as an
// orphaned claim and never removed; restore records (.snapshots/.restore-<claim>) whose claim is
// gone and that nothing touched within the grace period are leftovers --fix removes, judged again
// right before; a record next to an existing claim, a young one, one the driver would not name
// and one that is not an empty directory are left alone. Before, report listed neither: an
// upstream snapshot directory fitting a ${pvc.metadata.name} class showed as an orphaned claim,
// and records of dead restores stayed unseen.
import t from 'tap';
import type { KubeApi, V1PersistentVolume, V1StorageClass } from '../../../src/k8s/index.js';
import { nfsClasses, readNfs, type KubeFacts } from '../../../src/cli/report/facts.js';
import { runAction } from '../../../src/cli/report/fix.js';
import { INFO_KINDS, type Action } from '../../../src/cli/report/findings.js';
import { nfsFindings } from '../../../src/cli/report/nfs-findings.js';
import { upstreamArchiveSource } from '../../../src/nfs/controller/snapshots/upstream-snapshot-scan.js';
import { pino } from 'pino';
import type { NfsStore } from '../../../src/nfs/controller/store/store.js';
import { FakeNas, FakeNasStores, type FNode } from '../nfs/controller/fake-nas.js';

const SERVER = '127.0.0.1';
const SHARE = '/srv/k8s';
const NOW = Date.UTC(2026, 11, 2, 12);
const HOUR = 3_600_000;
const UID = '0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0';
const log = pino({ level: 'silent' });
const enc = encodeURIComponent;

function touchAll(n: FNode, ms: number): void {
  n.changedMs = ms;
  for (const c of n.children.values()) touchAll(c, ms);
}

function world() {
  const nas = new FakeNas('3');
  nas.addExport(SHARE, 'fs1');
  const at = (p: string) => `${SHARE}/${p}`;
  // csi-driver-nfs snapshots: compressed, plain, both; and look-alikes that are not.
  nas.put(at(`snapshot-${UID}/pvc-${UID}.tar.gz`), 'file');
  nas.put(at('snapshot-plain/data.tar'), 'file');
  nas.put(at('snapshot-both/src.tar'), 'file');
  nas.put(at('snapshot-both/src.tar.gz'), 'file');
  nas.put(at('two-sources/a.tar.gz'), 'file');
  nas.put(at('two-sources/b.tar.gz'), 'file');
  nas.put(at('with-more/x.tar.gz'), 'file');
  nas.put(at('with-more/notes'), 'file');
  nas.put(at('with-dir/x.tar.gz'), 'file');
  nas.put(at('with-dir/sub'));
  nas.put(at('archived-old/x.tar.gz'), 'file');
  nas.put(at(`pvc-${UID}/backup.tar.gz`), 'file'); // the provisioner's name: a claim
  nas.put(at('live/db.tar.gz'), 'file'); // a PV uses it: a claim
  // Restore records.
  nas.put(at('gone-old'));
  nas.put(at('pvc-restored/data'));
  nas.put(at(`.snapshots/.restore-${enc('claim-gone')}`));
  nas.put(at(`.snapshots/.restore-${enc('ns/claim-gone')}`));
  nas.put(at(`.snapshots/.restore-${enc('pvc-restored')}`));
  nas.put(at(`.snapshots/.restore-${enc('claim-young')}`));
  nas.put(at('.snapshots/.restore-%2E%2E'));
  nas.put(at('.snapshots/.restore-full/x'), 'file');
  nas.put(at('.snapshots/.restore-file'), 'file');
  nas.put(at('.snapshots/.restore-live'));
  // Filled records (a finished restore's, kept until DeleteVolume): next to their claim, without it.
  nas.put(at(`.snapshots/.filled-${enc('pvc-restored')}@pvc-restored`));
  nas.put(at(`.snapshots/.filled-${enc('ns/claim-gone')}@pvc-${UID}`));
  nas.put(at(`.snapshots/.filled-${enc('claim-gone')}@`));
  touchAll(nas.find(SHARE) as FNode, NOW - 3 * HOUR);
  nas.touch(at(`.snapshots/.restore-${enc('claim-young')}`), NOW - 60_000);
  const stores = new FakeNasStores(new Map([[SERVER, nas]]));
  const sc: V1StorageClass = {
    metadata: { name: 'nfs' },
    provisioner: 'nfs.csi.k8s.io',
    parameters: { server: SERVER, share: SHARE, subDir: '${pvc.metadata.name}', onDelete: 'delete' },
  };
  const pv = (name: string, subDir: string): V1PersistentVolume => ({
    metadata: { name },
    spec: {
      csi: {
        driver: 'nfs.csi.k8s.io',
        volumeHandle: `${SERVER}#srv/k8s#${subDir}#${name}#`,
        volumeAttributes: { server: SERVER, share: SHARE, subDir },
      },
    },
  });
  const k: KubeFacts = {
    pvs: [pv('pvc-live', 'live'), pv('pvc-uses-live-record', 'live')],
    pvcs: [],
    attachments: [],
    classes: [sc],
    birth: NOW - 30 * 24 * HOUR,
  };
  return { nas, stores, k, at };
}

const rules = { controllerVmId: 9999, graceMs: HOUR, now: NOW };

t.test('the archive shapes csi-driver-nfs leaves: one source, .tar.gz and/or .tar', async (t) => {
  t.equal(upstreamArchiveSource(['pvc-1.tar.gz']), 'pvc-1');
  t.equal(upstreamArchiveSource(['pvc-1.tar']), 'pvc-1');
  t.equal(upstreamArchiveSource(['pvc-1.tar', 'pvc-1.tar.gz']), 'pvc-1');
  t.equal(upstreamArchiveSource(['a.tar.tar']), 'a.tar');
  for (const names of [[], ['a.tar.gz', 'b.tar.gz'], ['a.tgz'], ['a.tar.gz', 'x'], ['.tar'], ['a', 'b', 'c']])
    t.equal(upstreamArchiveSource(names), undefined, names.join(','));
});

t.test('report lists csi-driver-nfs snapshots as information, never as orphaned claims', async (t) => {
  const { stores, k } = world();
  const facts = await readNfs(nfsClasses(k.classes), k.pvs, stores, {
    signal: AbortSignal.timeout(5_000),
    sizes: true,
  });
  t.same(
    facts.upstreamSnapshots.map((s) => [s.name, s.src, s.archives.map((a) => a.name)]),
    [
      ['snapshot-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0', `pvc-${UID}`, [`pvc-${UID}.tar.gz`]],
      ['snapshot-both', 'src', ['src.tar', 'src.tar.gz']],
      ['snapshot-plain', 'data', ['data.tar']],
    ],
    'only directories holding exactly one source’s archives; no claim a PV uses, no pvc-<uid>, no archive',
  );
  const found = nfsFindings(facts, k, rules);
  const up = found.filter((f) => f.kind === 'upstream-snapshot');
  t.equal(up.length, 3);
  t.match(
    up.find((f) => f.what.startsWith('snapshot-plain')),
    {
      where: `${SERVER}:${SHARE}`,
      what: 'snapshot-plain/data.tar',
      detail:
        /csi-driver-nfs snapshot snapshot-plain of data \(restorable by this driver from handle 127\.0\.0\.1#srv\/k8s#snapshot-plain#snapshot-plain#data; removed only by DeleteSnapshot\)/,
      ageMs: 3 * HOUR,
    },
  );
  t.ok(INFO_KINDS.has('upstream-snapshot'), 'information: not a problem for the exit code');
  t.notOk(
    up.some((f) => f.action),
    'no action: --fix never removes one',
  );
  const dirs = found.filter((f) => f.kind === 'orphan-dir').map((f) => f.what);
  t.notOk(
    dirs.some((d) => d.startsWith('snapshot-')),
    'a snapshot directory that fits the class layout is not an orphaned claim',
  );
  t.ok(dirs.includes('two-sources') && dirs.includes('with-more'), 'look-alikes stay what they were');
});

t.test('restore records: a dead restore’s is a leftover, the others stay', async (t) => {
  const { stores, k } = world();
  const facts = await readNfs(nfsClasses(k.classes), k.pvs, stores, {
    signal: AbortSignal.timeout(5_000),
    sizes: true,
  });
  const by = new Map(
    nfsFindings(facts, k, rules)
      .filter((f) => f.kind === 'restore-marker')
      .map((f) => [f.what, f]),
  );
  t.same([...by.keys()].sort(), [
    '.snapshots/.filled-claim-gone@',
    `.snapshots/.filled-ns%2Fclaim-gone@pvc-${UID}`,
    '.snapshots/.restore-%2E%2E',
    '.snapshots/.restore-claim-gone',
    '.snapshots/.restore-claim-young',
    '.snapshots/.restore-file',
    '.snapshots/.restore-full',
    '.snapshots/.restore-live',
    '.snapshots/.restore-ns%2Fclaim-gone',
    '.snapshots/.restore-pvc-restored',
  ]);
  t.match(by.get('.snapshots/.restore-claim-gone'), {
    detail: /into claim-gone, which does not exist/,
    ageMs: 3 * HOUR,
    action: { type: 'remove-restore-marker', server: SERVER, share: SHARE, marker: '.snapshots/.restore-claim-gone' },
  });
  t.match(by.get('.snapshots/.restore-ns%2Fclaim-gone'), { action: { type: 'remove-restore-marker' } });
  t.match(by.get('.snapshots/.restore-pvc-restored'), { kept: /claim directory exists.*orphan-dir/ });
  t.match(by.get('.snapshots/.restore-live'), { kept: /claim directory exists.*PV pvc-live uses/ });
  t.match(by.get('.snapshots/.restore-claim-young'), { kept: /grace period/ });
  t.match(by.get('.snapshots/.restore-%2E%2E'), { kept: /not one the driver gives/ });
  t.match(by.get('.snapshots/.restore-full'), { kept: /holding 1 entries/ });
  t.match(by.get('.snapshots/.restore-file'), { kept: /a file, not the empty record/ });
  t.notOk(
    by.has('.snapshots/.filled-pvc-restored@pvc-restored'),
    'a finished restore’s record next to its claim is no finding: every restored claim has one',
  );
  t.match(by.get(`.snapshots/.filled-ns%2Fclaim-gone@pvc-${UID}`), {
    detail: /finished restore or clone into ns\/claim-gone, which does not exist/,
    action: { type: 'remove-restore-marker', marker: `.snapshots/.filled-ns%2Fclaim-gone@pvc-${UID}` },
  });
  t.match(by.get('.snapshots/.filled-claim-gone@'), { kept: /not one the driver gives/ }, 'no volume name');
  for (const [what, f] of by)
    if (!what.includes('claim-gone') || what.endsWith('@')) t.notOk(f.action, `${what}: no action`);
  t.notOk(INFO_KINDS.has('restore-marker'), 'a problem: report exits 1 while one is there');
});

t.test('report --fix removes a dead restore’s record through the gate, judged again', async (t) => {
  const { nas, stores, k, at } = world();
  const ctx = {
    core: {} as never,
    kube: { listPersistentVolumes: () => Promise.resolve([]) } as unknown as KubeApi,
    stores,
    nfs: { classes: nfsClasses(k.classes), addresses: new Map([[SERVER, [SERVER]]]) },
    log,
    signal: AbortSignal.timeout(5_000),
  };
  const act = (marker: string, changedAt = NOW - 3 * HOUR): Action => ({
    type: 'remove-restore-marker',
    server: SERVER,
    share: SHARE,
    marker,
    changedAt,
  });
  t.equal(await runAction(ctx, act('.snapshots/.restore-claim-gone')), 'removed');
  t.notOk(nas.find(at('.snapshots/.restore-claim-gone')), 'the record is gone');
  t.equal(await runAction(ctx, act('.snapshots/.restore-claim-gone')), 'already gone', 'a retry');
  const filled = `.snapshots/.filled-ns%2Fclaim-gone@pvc-${UID}`;
  t.equal(await runAction(ctx, act(filled)), 'removed', 'a finished restore’s record whose claim is gone');
  t.notOk(nas.find(at(filled)));
  // A restore started since the listing: its claim exists now.
  nas.put(at('ns/claim-gone'));
  await t.rejects(runAction(ctx, act('.snapshots/.restore-ns%2Fclaim-gone')), /exists now/);
  t.ok(nas.find(at('.snapshots/.restore-ns%2Fclaim-gone')), 'kept');
  await t.rejects(
    runAction(ctx, act('.snapshots/.restore-claim-young')),
    /changed since the listing/,
    'touched after the listing',
  );
  for (const m of [
    '.snapshots/.restore-%2E%2E',
    '.snapshots/.restore-full',
    '.snapshots/.restore-file',
    '.snapshots/x/.restore-claim-gone',
  ])
    await t.rejects(runAction(ctx, act(m)), /not a restore record/, `refused: ${m}`);
  t.ok(nas.find(at('.snapshots/.restore-full/x')) && nas.find(at('.snapshots/.restore-file')));
  await t.rejects(runAction(ctx, act('.snapshots/.restore-pvc-restored')), /exists now/, 'its claim exists');
  t.ok(nas.find(at('pvc-restored/data')) && nas.find(at('.snapshots/.restore-pvc-restored')));
});

t.test('a restore that makes its claim while --fix removes the record gets the record back', async (t) => {
  const { nas, k, at } = world();
  // The claim appears right after the rmdir: a restore started between the re-read and it.
  class Racing extends FakeNasStores {
    override open(server: string, share: string): NfsStore {
      const store = super.open(server, share);
      return {
        ...store,
        removeDirIfEmpty: async (p, o) => {
          const r = await store.removeDirIfEmpty(p, o);
          nas.put(at('claim-gone'));
          return r;
        },
      };
    }
  }
  const racing = new Racing(new Map([[SERVER, nas]]));
  const ctx = {
    core: {} as never,
    kube: { listPersistentVolumes: () => Promise.resolve([]) } as unknown as KubeApi,
    stores: racing,
    nfs: { classes: nfsClasses(k.classes), addresses: new Map([[SERVER, [SERVER]]]) },
    log,
    signal: AbortSignal.timeout(5_000),
  };
  const marker = '.snapshots/.restore-claim-gone';
  await t.rejects(
    runAction(ctx, { type: 'remove-restore-marker', server: SERVER, share: SHARE, marker, changedAt: NOW - 3 * HOUR }),
    /appeared meanwhile.*record is back/,
  );
  t.equal(nas.find(at(marker))?.type, 'dir', 'the record is there again');
});
