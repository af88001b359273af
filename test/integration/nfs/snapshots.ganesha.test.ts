// NFS snapshots end to end against a real nfs-ganesha, through the controller: a claim holding a
// tree with every kind of entry and odd attribute is snapshotted, deleted (onDelete=delete),
// restored into a new claim and cloned; both equal the source at snapshot time exactly.
import t from 'tap';
import fs from 'node:fs/promises';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../../../src/csi/types.js';
import { createNfsController } from '../../../src/nfs/controller/controller.js';
import { implemented } from '../../helpers/implemented.js';
import { startTalosExport } from '../../helpers/ganesha-export.js';
import { buildTree, describeTree, restoreTimes, settable } from './tree-meta.js';

const { g, talos: TALOS, onDisk } = await startTalosExport(t);
const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const c = implemented(
  createNfsController({
    log: pino({ level: 'silent' }),
    callTimeoutMs: 5000,
    nfsPort: g.nfsPort,
    mountPort: g.mountPort,
  }),
  ['createSnapshot', 'deleteSnapshot', 'listSnapshots'],
);
t.teardown(() => c.close());
const cap = { mount: { fsType: '', mountFlags: [], volumeMountGroup: '' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };
const volReq = (name: string, source?: CreateVolumeRequest['volumeContentSource']): CreateVolumeRequest => ({
  name,
  capacityRange: { requiredBytes: '1024', limitBytes: '0' },
  volumeCapabilities: [cap as unknown as VolumeCapability],
  parameters: { server: g.server, share: TALOS },
  secrets: {},
  volumeContentSource: source ?? null,
  accessibilityRequirements: null,
  mutableParameters: {},
});

t.test('snapshot, delete the claim, restore and clone: metadata equal exactly', async (t) => {
  const vol = (await c.createVolume(volReq('pvc-src'), ctx)).volume?.volumeId ?? '';
  await buildTree(onDisk('pvc-src'));
  const want = await describeTree(onDisk('pvc-src'));
  restoreTimes(onDisk('pvc-src'), want);
  const t0 = Date.now();
  const snap = (await c.createSnapshot({ name: 'snap-1', sourceVolumeId: vol, secrets: {}, parameters: {} }, ctx))
    .snapshot;
  t.comment(`snapshot of ${want.length} entries in ${Date.now() - t0} ms`);
  t.equal(snap?.readyToUse, true);
  t.ok(Number(snap?.sizeBytes) > 300 * 1024);
  // The snapshot's reads moved the source's atimes: put them back for the clone to copy.
  restoreTimes(onDisk('pvc-src'), want);
  const clone = await c.createVolume(volReq('pvc-clone', { volume: { volumeId: vol } }), ctx);
  t.ok(clone.volume?.volumeId);
  await c.deleteVolume({ volumeId: vol, secrets: {} }, ctx);
  await t.rejects(fs.stat(onDisk('pvc-src')), 'source claim gone');
  await c.createVolume(volReq('pvc-restored', { snapshot: { snapshotId: snap?.snapshotId ?? '' } }), ctx);
  t.same(settable(await describeTree(onDisk('pvc-restored'))), settable(want), 'restore equals the source');
  t.same(settable(await describeTree(onDisk('pvc-clone'))), settable(want), 'clone equals the source');
  const listed = await c.listSnapshots(
    { maxEntries: 0, startingToken: '', sourceVolumeId: vol, snapshotId: '', secrets: {} },
    ctx,
  );
  t.same(
    listed.entries?.map((e) => e.snapshot?.snapshotId),
    [snap?.snapshotId],
  );
  await c.deleteSnapshot({ snapshotId: snap?.snapshotId ?? '', secrets: {} }, ctx);
  t.same(
    (await fs.readdir(onDisk('.snapshots'))).sort(),
    ['.filled-pvc-clone@pvc-clone', '.filled-pvc-restored@pvc-restored'],
    'the snapshot gone; no restore record, the filled records of the live claims',
  );
});
