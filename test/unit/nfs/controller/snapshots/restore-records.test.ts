// A restore record authorises only the request that wrote it (same claim, CSI volume name and
// content source): a stale one — left by a killed restore and kept across a plain create, a
// retain and a later restore, or made by hand — never turns a restore into a delete.
import t from 'tap';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../../../../../src/csi/types.js';
import { createNfsController } from '../../../../../src/nfs/controller/controller.js';
import { restoreMarkerOf } from '../../../../../src/nfs/controller/snapshots/fill-records.js';
import { implemented } from '../../../../helpers/implemented.js';
import { outcomeText } from '../../../../helpers/outcome.js';
import { FakeStores } from '../fake-store.js';

const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const SERVER = 'nas.local';
const SHARE = '/volume1/k8s-volumes/talos';
const cap = { mount: { fsType: '', mountFlags: [], volumeMountGroup: '' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };

/** A claim of the seed's class: subDir <namespace>/<pvc>, so a re-created PVC lands in the same directory. */
function claim(pv: string, onDelete: string, source?: CreateVolumeRequest['volumeContentSource']): CreateVolumeRequest {
  return {
    name: pv,
    capacityRange: { requiredBytes: '1024', limitBytes: '0' },
    volumeCapabilities: [cap as unknown as VolumeCapability],
    parameters: {
      server: SERVER,
      share: SHARE,
      onDelete,
      subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
      'csi.storage.k8s.io/pvc/namespace': 'media',
      'csi.storage.k8s.io/pvc/name': 'app',
    },
    secrets: {},
    volumeContentSource: source ?? null,
    accessibilityRequirements: null,
    mutableParameters: {},
  };
}

async function world() {
  const stores = new FakeStores();
  stores.put(SERVER, SHARE);
  const c = implemented(createNfsController({ log: pino({ level: 'silent' }), callTimeoutMs: 1000, stores }), [
    'createSnapshot',
  ]);
  const store = stores.open(SERVER, SHARE);
  const src = (
    await c.createVolume({ ...claim('pvc-src', 'delete'), parameters: { server: SERVER, share: SHARE } }, ctx)
  ).volume?.volumeId;
  await store.ensureDir('pvc-src/from-snapshot', {});
  const snap = await c.createSnapshot({ name: 'snap-1', sourceVolumeId: src ?? '', secrets: {}, parameters: {} }, ctx);
  const source = { snapshot: { snapshotId: snap.snapshot?.snapshotId ?? '' } };
  return { stores, c, store, source };
}

t.test(
  'kill inside a restore, delete, plain create, write, retain, restore into the name: the data stays',
  async (t) => {
    const { stores, c, store, source } = await world();
    // kill -9 inside the restore of pvc-r1: the copy is cut, the process gone.
    stores.onCopy = () => {
      throw new Error('killed');
    };
    t.match(await outcomeText(c.createVolume(claim('pvc-r1', 'retain', source), ctx)), /killed/);
    stores.onCopy = undefined;
    // The PVC is deleted before a PV existed (no DeleteVolume) and made again without a dataSource.
    const plain = (await c.createVolume(claim('pvc-p2', 'retain'), ctx)).volume?.volumeId ?? '';
    t.same(
      (await store.list('.snapshots')).filter((e) => e.name.startsWith('.restore-')),
      [],
      'the plain create left no restore record behind',
    );
    await store.ensureDir('media/app/written-by-the-app', {});
    await c.deleteVolume({ volumeId: plain, secrets: {} }, ctx); // onDelete: retain
    t.ok(await store.stat('media/app/written-by-the-app'), 'retained');

    t.match(
      await outcomeText(c.createVolume(claim('pvc-r3', 'retain', source), ctx)),
      /^AlreadyExists: .*media\/app already exists and was not filled by this restore/,
      'a later restore into the name is refused',
    );
    t.match(
      await outcomeText(c.createVolume(claim('pvc-r1', 'retain', source), ctx)),
      /^AlreadyExists/,
      'so is a late retry of the killed restore',
    );
    t.ok(await store.stat('media/app/written-by-the-app'), 'the retained data is still there');
  },
);

t.test('a record authorises only the request that wrote it', async (t) => {
  const { stores, c, store, source } = await world();
  await store.ensureDir('media/app/kept', {});
  const other = { snapshot: { snapshotId: source.snapshot.snapshotId.replace('snap-1', 'snap-2') } };
  // Made by hand, or left by another request: the legacy claim-only form, another name, another source.
  for (const forged of [
    '.snapshots/.restore-media%2Fapp',
    restoreMarkerOf('media/app', 'pvc-someone-else', `snapshot:${source.snapshot.snapshotId}`),
    restoreMarkerOf('media/app', 'pvc-r9', `snapshot:${other.snapshot.snapshotId}`),
  ]) {
    await store.ensureDir(forged, {});
    t.match(await outcomeText(c.createVolume(claim('pvc-r9', 'retain', source), ctx)), /^AlreadyExists/, forged);
    t.ok(await store.stat('media/app/kept'), `${forged}: the directory is untouched`);
    await store.removeDirIfEmpty(forged);
  }
  // The request's own record (its killed attempt) is what lets it empty and fill again.
  await store.ensureDir(restoreMarkerOf('media/app', 'pvc-r9', `snapshot:${source.snapshot.snapshotId}`), {});
  t.ok((await c.createVolume(claim('pvc-r9', 'retain', source), ctx)).volume);
  t.same(await store.list('media/app'), [{ name: 'from-snapshot', type: 'dir' }], 'filled from the snapshot');
  t.same(
    (await store.list('.snapshots')).map((e) => e.name).filter((n) => n.startsWith('.')),
    ['.filled-media%2Fapp@pvc-r9'],
    'its restore record is gone, its filled record kept',
  );
  t.equal(stores.calls.filter((x) => x.startsWith('copyTree')).length, 2, 'one snapshot copy, one restore copy');
});
