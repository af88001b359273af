// The running NFS copies as gauges: one series set per copy while it runs (snapshot, restore,
// clone, each named by its CSI name), its last progress report as the values, and nothing left
// once it ends, failed copies included.
import t from 'tap';
import { pino } from 'pino';
import type { CallContext } from '../../../../../src/csi/types.js';
import { createNfsController } from '../../../../../src/nfs/controller/controller.js';
import { CopyProgress, trackedCopy } from '../../../../../src/nfs/controller/copy/copy-progress.js';
import { emptyStats } from '../../../../../src/nfs/controller/copy/copy-tree.js';
import type { GaugeSample } from '../../../../../src/csi/gauges.js';
import { implemented } from '../../../../helpers/implemented.js';
import { FakeStores } from '../fake-store.js';

const log = pino({ level: 'silent' });
const ctx: CallContext = { log, signal: new AbortController().signal };
const value = (ss: readonly GaugeSample[], name: string) => ss.find((s) => s.name === name)?.value;

t.test('a running copy: its last report and its age; gone when it ends, also when it fails', async (t) => {
  let now = 1000;
  const copies = new CopyProgress(() => now);
  t.same(copies.snapshot(), []);
  const id = { kind: 'snapshot', server: 'nas', name: 'snap-1' } as const;
  const seen: GaugeSample[][] = [];
  await trackedCopy(copies, log, id, {}, async (progress) => {
    progress({ ...emptyStats(), dirs: 2, files: 5, hardLinks: 1, bytes: 4096, serverCopied: 3, cloned: 1 });
    now = 3500;
    seen.push([...copies.snapshot()]);
  });
  const s = seen[0] ?? [];
  t.same(s[0]?.labels, { server: 'nas', kind: 'snapshot', name: 'snap-1' });
  t.equal(value(s, 'pve_csi_nfs_copy_bytes'), 4096);
  t.equal(value(s, 'pve_csi_nfs_copy_entries'), 8);
  t.equal(value(s, 'pve_csi_nfs_copy_server_side_files'), 4);
  t.equal(value(s, 'pve_csi_nfs_copy_running_seconds'), 2.5);
  t.same(copies.snapshot(), [], 'ended');
  await t.rejects(
    trackedCopy(copies, log, id, {}, async () => {
      throw new Error('NFS server went away');
    }),
  );
  t.same(copies.snapshot(), [], 'a failed copy leaves no series');
  t.same(
    copies.defs.map((d) => d.name),
    [
      'pve_csi_nfs_copy_bytes',
      'pve_csi_nfs_copy_entries',
      'pve_csi_nfs_copy_server_side_files',
      'pve_csi_nfs_copy_running_seconds',
    ],
  );
});

t.test('CreateSnapshot and a clone are tracked by kind and CSI name while they copy', async (t) => {
  const SERVER = 'nas.local';
  const SHARE = '/volume1/k8s-volumes/talos';
  const stores = new FakeStores();
  stores.put(SERVER, SHARE);
  const copies = new CopyProgress();
  const c = implemented(createNfsController({ log, callTimeoutMs: 1000, stores, copyProgress: copies }), [
    'createSnapshot',
    'createVolume',
  ]);
  const seen: string[] = [];
  stores.onCopy = () =>
    seen.push(
      ...copies
        .snapshot()
        .filter((s) => s.name === 'pve_csi_nfs_copy_bytes')
        .map((s) => `${s.labels.kind} ${s.labels.name}`),
    );
  const cap = {
    mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
    accessMode: { mode: 'SINGLE_NODE_WRITER' },
  };
  const req = (name: string, source: unknown) =>
    c.createVolume(
      {
        name,
        capacityRange: { requiredBytes: '1024', limitBytes: '0' },
        volumeCapabilities: [cap as never],
        parameters: { server: SERVER, share: SHARE },
        secrets: {},
        volumeContentSource: source as never,
        accessibilityRequirements: null,
        mutableParameters: {},
      },
      ctx,
    );
  const src = (await req('pvc-src', null)).volume?.volumeId ?? '';
  await c.createSnapshot({ name: 'snapshot-a', sourceVolumeId: src, secrets: {}, parameters: {} }, ctx);
  await req('pvc-clone', { volume: { volumeId: src } });
  t.same(seen, ['snapshot snapshot-a', 'clone pvc-clone']);
  t.same(copies.snapshot(), [], 'nothing running afterwards');
});
