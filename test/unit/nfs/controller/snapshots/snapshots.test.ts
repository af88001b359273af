// NFS snapshot RPCs over the in-memory store: layout on the share, idempotency (same name and
// source answers the same snapshot, another source is ALREADY_EXISTS), a snapshot outliving its
// claim under every onDelete, restore and clone, listing and paging, handles of both forms.
import t from 'tap';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../../../../../src/csi/types.js';
import { createNfsController } from '../../../../../src/nfs/controller/controller.js';
import { composeSnapshotId, parseSnapshotId } from '../../../../../src/nfs/snapshot-id.js';
import { implemented } from '../../../../helpers/implemented.js';
import { outcomeText } from '../../../../helpers/outcome.js';
import { FakeStores } from '../fake-store.js';

const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const SERVER = 'nas.local';
const SHARE = '/volume1/k8s-volumes/talos';
const cap = { mount: { fsType: '', mountFlags: [], volumeMountGroup: '' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };

function volReq(
  name: string,
  onDelete: string,
  source?: CreateVolumeRequest['volumeContentSource'],
): CreateVolumeRequest {
  return {
    name,
    capacityRange: { requiredBytes: '1024', limitBytes: '0' },
    volumeCapabilities: [cap as unknown as VolumeCapability],
    parameters: { server: SERVER, share: SHARE, onDelete },
    secrets: {},
    volumeContentSource: source ?? null,
    accessibilityRequirements: null,
    mutableParameters: {},
  };
}

function setup() {
  const stores = new FakeStores();
  stores.put(SERVER, SHARE);
  const c = implemented(
    createNfsController({
      log: pino({ level: 'silent' }),
      callTimeoutMs: 1000,
      stores,
      now: () => new Date('2026-03-01T12:00:00.250Z'),
    }),
    ['createSnapshot', 'deleteSnapshot', 'listSnapshots'],
  );
  const snap = (name: string, sourceVolumeId: string) =>
    c.createSnapshot({ name, sourceVolumeId, secrets: {}, parameters: {} }, ctx);
  const list = async (over: Partial<Parameters<typeof c.listSnapshots>[0]> = {}) => {
    const r = await c.listSnapshots(
      { maxEntries: 0, startingToken: '', sourceVolumeId: '', snapshotId: '', secrets: {}, ...over },
      ctx,
    );
    return { entries: r.entries ?? [], nextToken: r.nextToken ?? '' };
  };
  return { stores, c, snap, list };
}

const idOf = async (p: Promise<{ volume?: { volumeId?: string } | null }>) => (await p).volume?.volumeId ?? '';

t.test('a snapshot is a complete copy under snapshots/, answered again for the same name and source', async (t) => {
  const { stores, c, snap } = setup();
  const vol = await idOf(c.createVolume(volReq('pvc-a', 'delete'), ctx));
  const store = stores.open(SERVER, SHARE);
  await store.ensureDir('pvc-a/data', { mode: 0o700, uid: 5 });
  const r = await snap('snap-1', vol);
  t.match(r.snapshot, { sourceVolumeId: vol, readyToUse: true, creationTime: { seconds: 1772366400, nanos: 250e6 } });
  t.equal(r.snapshot?.snapshotId, composeSnapshotId({ server: SERVER, share: SHARE, name: 'snap-1' }));
  const entries = await store.list('.snapshots/snap-1');
  t.same(entries.map((e) => e.name).sort()[1], 'v1,1772366400250,0,' + encodeURIComponent(vol), 'completion record');
  t.same(await store.list('.snapshots/snap-1/tree'), [{ name: 'data', type: 'dir' }]);
  t.same((await snap('snap-1', vol)).snapshot, r.snapshot, 'same name, same source: the same snapshot');
  t.equal(stores.calls.filter((x) => x.startsWith('copyTree')).length, 1, 'copied once');

  const other = await idOf(c.createVolume(volReq('pvc-b', 'delete'), ctx));
  t.match(await outcomeText(snap('snap-1', other)), /^AlreadyExists: snapshot "snap-1" already exists with source/);
  t.match(await outcomeText(snap('snap-2', `${SERVER}#volume1/k8s-volumes/talos#gone##`)), /^NotFound/);
  t.match(await outcomeText(snap('snap-3', 'not a handle')), /^NotFound/);
  t.match(await outcomeText(snap('a#b', vol)), /^InvalidArgument/);
});

t.test('a leftover temporary of a killed attempt is replaced', async (t) => {
  const { stores, c, snap, list } = setup();
  const vol = await idOf(c.createVolume(volReq('pvc-a', 'delete'), ctx));
  const store = stores.open(SERVER, SHARE);
  await store.ensureDir('.snapshots/s/tree/half-copied', {});
  t.same((await list()).entries, [], 'a snapshot without its completion record is not listed');
  await snap('s', vol);
  t.same(await store.list('.snapshots/s/tree'), [], 'the killed copy was replaced');
  t.equal((await list()).entries.length, 1);
});

for (const onDelete of ['delete', 'retain', 'archive']) {
  t.test(`the snapshot outlives its claim (onDelete=${onDelete}) and restores`, async (t) => {
    const { stores, c, snap } = setup();
    const vol = await idOf(c.createVolume(volReq('pvc-a', onDelete), ctx));
    const store = stores.open(SERVER, SHARE);
    await store.ensureDir('pvc-a/keep', { mode: 0o750 });
    const id = (await snap('s', vol)).snapshot?.snapshotId ?? '';
    await c.deleteVolume({ volumeId: vol, secrets: {} }, ctx);
    const source = { snapshot: { snapshotId: id }, type: 'snapshot' as const };
    const r = await c.createVolume(volReq('pvc-r', 'delete', source), ctx);
    t.same(r.volume?.contentSource, source);
    t.same(await store.list('pvc-r'), [{ name: 'keep', type: 'dir' }]);
    t.equal((await store.stat('pvc-r/keep'))?.mode, 0o750);
    t.same(
      await store.list('.snapshots'),
      [
        { name: 's', type: 'dir' },
        { name: '.filled-pvc-r@pvc-r', type: 'dir' },
      ],
      'no restore record left; the filled record of this claim',
    );
    await c.createVolume(volReq('pvc-r', 'delete', source), ctx);
    t.equal(stores.calls.filter((x) => x.startsWith('copyTree')).length, 2, 'a repeated restore copies nothing');
  });
}

t.test('a restore never answers with a claim directory it did not fill', async (t) => {
  const { stores, c, snap } = setup();
  const store = stores.open(SERVER, SHARE);
  const vol = await idOf(c.createVolume(volReq('pvc-a', 'delete'), ctx));
  await store.ensureDir('pvc-a/new', {});
  const source = {
    snapshot: { snapshotId: (await snap('s', vol)).snapshot?.snapshotId ?? '' },
    type: 'snapshot' as const,
  };
  // Claims whose subDir is not unique per claim (the seed's namespace/name template, one PVC
  // re-created under its name): every request below lands in `shared`.
  const into = (name: string, onDelete: string, subDir = 'shared') => {
    const r = volReq(name, onDelete, source);
    return c.createVolume({ ...r, parameters: { ...r.parameters, subDir } }, ctx);
  };
  const copies = () => stores.calls.filter((x) => x.startsWith('copyTree')).length;
  // What onDelete: retain kept of an earlier claim.
  await store.ensureDir('shared/old', {});
  t.match(
    await outcomeText(into('pvc-r1', 'retain')),
    /^AlreadyExists: .*shared already exists and was not filled by this restore or clone \(pvc-r1\)/,
  );
  t.same(await store.list('shared'), [{ name: 'old', type: 'dir' }], 'the directory is left as it was');
  t.equal(copies(), 1, 'nothing was copied into it');

  // A restore that filled its claim is answered again, and only for that request.
  await store.removeTree('shared');
  const r1 = await idOf(into('pvc-r1', 'retain'));
  t.same(await store.list('shared'), [{ name: 'new', type: 'dir' }]);
  t.equal(await idOf(into('pvc-r1', 'retain')), r1, 'the same request again: answered');
  t.equal(copies(), 2, 'without a copy');
  await c.deleteVolume({ volumeId: r1, secrets: {} }, ctx);
  t.same(await store.list('shared'), [{ name: 'new', type: 'dir' }], 'retained');
  t.match(await outcomeText(into('pvc-r2', 'retain')), /^AlreadyExists/, 'a new claim is not handed the old data');

  // A record whose claim directory went (removed by hand) answers for nothing: filled again.
  await store.removeTree('shared');
  t.equal(await idOf(into('pvc-r1', 'retain')), r1);
  t.equal(copies(), 3, 'copied again');

  // DeleteVolume of a deleted or archived claim takes its record with it.
  for (const onDelete of ['delete', 'archive']) {
    const id = await idOf(into(`pvc-${onDelete}`, onDelete, onDelete));
    t.ok((await store.list('.snapshots')).some((e) => e.name === `.filled-${onDelete}@pvc-${onDelete}`));
    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx);
    t.notOk(
      (await store.list('.snapshots')).some((e) => e.name.startsWith(`.filled-${onDelete}@`)),
      `onDelete=${onDelete}: no record left`,
    );
  }
});

t.test('clone of a volume; sources that do not exist are NotFound', async (t) => {
  const { stores, c } = setup();
  const vol = await idOf(c.createVolume(volReq('pvc-a', 'delete'), ctx));
  const store = stores.open(SERVER, SHARE);
  await store.ensureDir('pvc-a/x', {});
  await c.createVolume(volReq('pvc-c', 'delete', { volume: { volumeId: vol }, type: 'volume' }), ctx);
  t.same(await store.list('pvc-c'), [{ name: 'x', type: 'dir' }]);
  const gone = composeSnapshotId({ server: SERVER, share: SHARE, name: 'nope' });
  t.match(
    await outcomeText(c.createVolume(volReq('n1', 'delete', { snapshot: { snapshotId: gone } }), ctx)),
    /^NotFound/,
  );
  const noVol = `${SERVER}#volume1/k8s-volumes/talos#nope##`;
  t.match(await outcomeText(c.createVolume(volReq('n2', 'delete', { volume: { volumeId: noVol } }), ctx)), /^NotFound/);
  const elsewhere = `other#x#pvc-a##`;
  t.match(
    await outcomeText(c.createVolume(volReq('n3', 'delete', { volume: { volumeId: elsewhere } }), ctx)),
    /^InvalidArgument: .*copy within one share/,
  );
  t.same(await store.stat('n1'), null, 'nothing made for a failed restore');
});

t.test('list by id, by source, all, with paging; delete is idempotent', async (t) => {
  const { c, snap, list } = setup();
  const a = await idOf(c.createVolume(volReq('pvc-a', 'delete'), ctx));
  const b = await idOf(c.createVolume(volReq('pvc-b', 'delete'), ctx));
  const s1 = (await snap('s1', a)).snapshot?.snapshotId ?? '';
  await snap('s2', a);
  await snap('s3', b);
  t.equal((await list()).entries.length, 3);
  t.same(
    (await list({ snapshotId: s1 })).entries.map((e) => e.snapshot?.snapshotId),
    [s1],
  );
  t.same((await list({ snapshotId: `${s1}x` })).entries, []);
  t.equal((await list({ sourceVolumeId: a })).entries.length, 2);
  t.same((await list({ sourceVolumeId: 'nope' })).entries, []);
  const p1 = await list({ maxEntries: 2 });
  t.equal(p1.entries.length, 2);
  const p2 = await list({ maxEntries: 2, startingToken: p1.nextToken });
  t.equal(p2.entries.length, 1);
  t.equal(p2.nextToken, '');
  t.match(await outcomeText(list({ startingToken: 'x' })), /^Aborted/);
  await c.deleteSnapshot({ snapshotId: s1, secrets: {} }, ctx);
  await c.deleteSnapshot({ snapshotId: s1, secrets: {} }, ctx);
  await c.deleteSnapshot({ snapshotId: 'garbage', secrets: {} }, ctx);
  t.equal((await list()).entries.length, 2);
});

t.test('snapshot handles: ours and csi-driver-nfs, never one read as the other', async (t) => {
  const ours = composeSnapshotId({ server: 'nas', share: '/v/k', name: 'snapshot-1' });
  t.same(parseSnapshotId(ours), { kind: 'ours', server: 'nas', share: '/v/k', name: 'snapshot-1' });
  const up = 'nfs-server.default.svc.cluster.local#share#snapshot-016f#snapshot-016f#pvc-4bcb';
  t.same(parseSnapshotId(up), {
    kind: 'upstream',
    server: 'nfs-server.default.svc.cluster.local',
    share: '/share',
    dir: 'snapshot-016f',
    src: 'pvc-4bcb',
  });
  for (const bad of ['', 'a#b#c', 'a#b#x#y#..', 'a#b#x#y#z', 'nfs-snapshot/1#a#b', 's p#b#x#x#z'])
    t.equal(parseSnapshotId(bad), null, bad);
});

t.test('a csi-driver-nfs snapshot restores from its .tar.gz, else its .tar; neither is NotFound', async (t) => {
  const { stores, c } = setup();
  const base = '/volume1/k8s-volumes/talos';
  const handle = (name: string) => `${SERVER}#${base.slice(1)}#${name}#${name}#pvc-src`;
  stores.put(SERVER, `${base}/snapshot-a/pvc-src.tar.gz`, 'file');
  stores.put(SERVER, `${base}/snapshot-a/pvc-src.tar`, 'file');
  stores.put(SERVER, `${base}/snapshot-b/pvc-src.tar`, 'file');
  const restore = (pvc: string, name: string) =>
    c.createVolume(volReq(pvc, 'delete', { snapshot: { snapshotId: handle(name) } }), ctx);
  await restore('pvc-r1', 'snapshot-a');
  await restore('pvc-r2', 'snapshot-b');
  t.same(
    stores.calls.filter((x) => x.startsWith('unpackArchive')),
    ['unpackArchive snapshot-a/pvc-src.tar.gz -> pvc-r1', 'unpackArchive snapshot-b/pvc-src.tar -> pvc-r2'],
    'the compressed archive first, as csi-driver-nfs looks',
  );
  await restore('pvc-r1', 'snapshot-a');
  t.equal(stores.calls.filter((x) => x.startsWith('unpackArchive')).length, 2, 'a repeated restore unpacks nothing');
  t.match(await outcomeText(restore('pvc-r3', 'snapshot-c')), /^NotFound: .*pvc-src\.tar\.gz \(or \.tar\)/);
  t.same(
    (await stores.open(SERVER, SHARE).list('.snapshots')).map((e) => e.name).sort(),
    ['.filled-pvc-r1@pvc-r1', '.filled-pvc-r2@pvc-r2'],
    'no restore record left; a filled record per restored claim, none for the failed one',
  );
});
