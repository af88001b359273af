// NFS snapshots in `report` and `report --fix` against a real nfs-ganesha: the change times the
// leftover rule reads are the server's (a partial copy made now is young by its ctime, which no
// client can set back), the removal goes through the ownership gate over the real protocol (a
// symlink inside the partial copy pointing at a live claim is removed, not followed), and the
// complete snapshot is left alone and still restores.
import t from 'tap';
import fs from 'node:fs/promises';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../../../src/csi/types.js';
import type { KubeApi, V1StorageClass } from '../../../src/k8s/index.js';
import { nfsClasses, readNfs, resolveServers, type KubeFacts } from '../../../src/cli/report/facts.js';
import { runAction } from '../../../src/cli/report/fix.js';
import { nfsFindings } from '../../../src/cli/report/nfs-findings.js';
import { createNfsController } from '../../../src/nfs/controller/controller.js';
import { createNfsStores } from '../../../src/nfs/controller/store/stores.js';
import { collect } from '../../../src/metrics/findings-collect.js';
import { implemented } from '../../helpers/implemented.js';
import { startTalosExport } from '../../helpers/ganesha-export.js';

const { g, talos: TALOS, onDisk } = await startTalosExport(t);
const log = pino({ level: 'silent' });
const ctx: CallContext = { log, signal: new AbortController().signal };
const c = implemented(createNfsController({ log, callTimeoutMs: 5000, nfsPort: g.nfsPort, mountPort: g.mountPort }), [
  'createSnapshot',
  'deleteSnapshot',
  'listSnapshots',
]);
t.teardown(() => c.close());
const stores = createNfsStores({
  timeoutMs: 5000,
  nfsPort: g.nfsPort,
  mountPort: g.mountPort,
  privilegedPort: true,
  log,
});
t.teardown(() => stores.close());
const cap = { mount: { fsType: '', mountFlags: [], volumeMountGroup: '' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };
const volReq = (name: string, source?: CreateVolumeRequest['volumeContentSource']): CreateVolumeRequest => ({
  name,
  capacityRange: { requiredBytes: '1024', limitBytes: '0' },
  volumeCapabilities: [cap as unknown as VolumeCapability],
  parameters: { server: g.server, share: TALOS, onDelete: 'archive' },
  secrets: {},
  volumeContentSource: source ?? null,
  accessibilityRequirements: null,
  mutableParameters: {},
});

t.test(
  'a partial snapshot is young by the server ctime, then removed through the gate; the complete one stays',
  async (t) => {
    const vol = (await c.createVolume(volReq('pvc-src'), ctx)).volume?.volumeId ?? '';
    await fs.writeFile(onDisk('pvc-src/data'), 'source data');
    const snap = (await c.createSnapshot({ name: 'snap-done', sourceVolumeId: vol, secrets: {}, parameters: {} }, ctx))
      .snapshot;
    // What a CreateSnapshot killed mid-copy leaves, with a symlink to the live claim in it.
    await fs.mkdir(onDisk('.snapshots/snap-half/tree/a/b'), { recursive: true });
    await fs.writeFile(onDisk('.snapshots/snap-half/tree/a/b/f'), 'half');
    await fs.symlink('../../../pvc-src', onDisk('.snapshots/snap-half/tree/out'));
    const old = new Date(Date.now() - 48 * 3_600_000);
    await fs.utimes(onDisk('.snapshots/snap-half/tree/a/b/f'), old, old); // mtime only: ctime is now

    const sc = {
      metadata: { name: 'nfs' },
      provisioner: 'nfs.csi.k8s.io',
      parameters: { server: g.server, share: TALOS, onDelete: 'archive' },
    } as V1StorageClass;
    const k: KubeFacts = { pvs: [], pvcs: [], attachments: [], classes: [sc] };
    const judge = async (graceMs: number) => {
      const facts = await readNfs(nfsClasses(k.classes), k.pvs, stores, {
        signal: AbortSignal.timeout(10_000),
        sizes: true,
      });
      return nfsFindings(facts, k, { controllerVmId: 9999, graceMs, now: Date.now() }).filter((f) =>
        f.kind.endsWith('snapshot'),
      );
    };
    const young = await judge(60_000);
    t.match(
      young.map((f) => [f.kind, f.what, f.kept ?? f.action?.type]),
      [
        ['nfs-snapshot', '.snapshots/snap-done', undefined],
        ['partial-snapshot', '.snapshots/snap-half', /grace period/],
      ],
    );
    t.equal(young[0]?.sizeBytes, 'source data'.length, 'the bytes its completion record holds');
    t.equal(young[1]?.sizeBytes, 'half'.length, 'bytes of the files copied so far');

    await new Promise((r) => setTimeout(r, 1_500));
    const found = await judge(1_000);
    const metrics = await collect({
      kube: async () => k,
      stores,
      log,
      now: Date.now(),
      graceMs: 1_000,
      count: () => {},
    });
    t.same(
      metrics.findings.filter((f) => f.kind.endsWith('snapshot')).map((f) => [f.kind, f.what, f.action?.type]),
      found.map((f) => [f.kind, f.what, f.action?.type]),
      'the metrics judge the same',
    );
    const action = found.find((f) => f.kind === 'partial-snapshot')?.action;
    t.match(action, { type: 'remove-partial-snapshot', dir: '.snapshots/snap-half' });
    if (!action) return;
    const fixCtx = {
      core: {} as never,
      kube: { listPersistentVolumes: () => Promise.resolve([]) } as unknown as KubeApi,
      stores,
      nfs: { classes: nfsClasses(k.classes), addresses: await resolveServers([g.server]) },
      log,
      signal: AbortSignal.timeout(10_000),
    };
    t.equal(await runAction(fixCtx, action), 'removed');
    t.same(await fs.readdir(onDisk('.snapshots')), ['snap-done'], 'the partial copy is gone, the complete one stays');
    t.equal(await fs.readFile(onDisk('pvc-src/data'), 'utf8'), 'source data', 'the symlink was not followed');

    await c.deleteVolume({ volumeId: vol, secrets: {} }, ctx);
    await c.createVolume(volReq('pvc-restored', { snapshot: { snapshotId: snap?.snapshotId ?? '' } }), ctx);
    t.equal(await fs.readFile(onDisk('pvc-restored/data'), 'utf8'), 'source data', 'the snapshot still restores');
  },
);
