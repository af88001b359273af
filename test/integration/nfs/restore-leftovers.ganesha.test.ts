// What restores leave on a share, in `report` and `report --fix` against a real nfs-ganesha:
// a csi-driver-nfs snapshot archive made as upstream makes it (`tar -C <claim> -czf
// <share>/<name>/<src>.tar.gz .`) is listed as information with its handle — which then restores
// through the controller — and never as an orphaned claim of a class whose layout it fits;
// restore records (.snapshots/.restore-<claim>) are young by the server's ctime, and one whose
// claim is gone is removed through the gate once past the grace period, while the one next to an
// existing (partial) claim stays until that claim is removed; then the claim restores cleanly.
// (The chaos suite's scenario 7 makes these leftovers with real kills and removes them with --fix.)
import t from 'tap';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../../../src/csi/types.js';
import type { KubeApi, V1StorageClass } from '../../../src/k8s/index.js';
import { nfsClasses, readNfs, resolveServers, type KubeFacts } from '../../../src/cli/report/facts.js';
import { runAction } from '../../../src/cli/report/fix.js';
import type { Finding } from '../../../src/cli/report/findings.js';
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
const UID = (n: number) => `0b1c2d3e-4f50-6172-8394-a5b6c7d8e9${String(n).padStart(2, '0')}`;
const params = { server: g.server, share: TALOS, subDir: '${pvc.metadata.name}', onDelete: 'delete' };
const volReq = (name: string, source?: CreateVolumeRequest['volumeContentSource']): CreateVolumeRequest => ({
  name,
  capacityRange: { requiredBytes: '1024', limitBytes: '0' },
  volumeCapabilities: [cap as unknown as VolumeCapability],
  parameters: {
    ...params,
    'csi.storage.k8s.io/pvc/name': name,
    'csi.storage.k8s.io/pvc/namespace': 'default',
    'csi.storage.k8s.io/pv/name': name,
  },
  secrets: {},
  volumeContentSource: source ?? null,
  accessibilityRequirements: null,
  mutableParameters: {},
});
const sc = { metadata: { name: 'nfs' }, provisioner: 'nfs.csi.k8s.io', parameters: params } as V1StorageClass;
// A PV on the server: this cluster's view owns directories there (hasPvOn).
const k: KubeFacts = {
  pvs: [
    {
      metadata: { name: 'pvc-live' },
      spec: { csi: { driver: 'nfs.csi.k8s.io', volumeHandle: `${g.server}#${TALOS.slice(1)}#live#pvc-live#` } },
    },
  ],
  pvcs: [],
  attachments: [],
  classes: [sc],
  birth: Date.now() - 3_600_000,
};
const judge = async (graceMs: number): Promise<Finding[]> => {
  const facts = await readNfs(nfsClasses(k.classes), k.pvs, stores, {
    signal: AbortSignal.timeout(10_000),
    sizes: true,
  });
  return nfsFindings(facts, k, { controllerVmId: 9999, graceMs, now: Date.now() });
};
const fixCtx = async () => ({
  core: {} as never,
  kube: { listPersistentVolumes: () => Promise.resolve(k.pvs) } as unknown as KubeApi,
  stores,
  nfs: { classes: nfsClasses(k.classes), addresses: await resolveServers([g.server]) },
  log,
  signal: AbortSignal.timeout(10_000),
});
const summary = (list: Finding[]) => list.map((f) => [f.kind, f.what, f.kept ?? f.action?.type]);

t.test('a csi-driver-nfs archive is information, restorable, and never an orphaned claim', async (t) => {
  await fs.mkdir(onDisk('live'));
  await fs.mkdir(onDisk('upstream-src/d'), { recursive: true });
  await fs.writeFile(onDisk('upstream-src/d/f'), 'upstream data');
  const name = `snapshot-${UID(1)}`;
  await fs.mkdir(onDisk(name));
  execFileSync('tar', ['-C', onDisk('upstream-src'), '-czf', onDisk(`${name}/pvc-${UID(2)}.tar.gz`), '.']);
  await fs.rm(onDisk('upstream-src'), { recursive: true });

  const found = (await judge(1_000)).filter((f) => f.what.startsWith(name));
  t.match(summary(found), [['upstream-snapshot', `${name}/pvc-${UID(2)}.tar.gz`, undefined]], 'one finding, no action');
  const handle = `${g.server}#${TALOS.slice(1)}#${name}#${name}#pvc-${UID(2)}`;
  t.match(found[0]?.detail, `restorable by this driver from handle ${handle}`);
  t.ok((found[0]?.sizeBytes ?? 0) > 0, 'the archive’s size');
  const metrics = await collect({ kube: async () => k, stores, log, now: Date.now(), graceMs: 1_000, count: () => {} });
  t.ok(
    metrics.findings.some((f) => f.kind === 'upstream-snapshot' && f.what === found[0]?.what),
    'the metrics count it',
  );
  const restored = await c.createVolume(volReq(`pvc-${UID(3)}`, { snapshot: { snapshotId: handle } }), ctx);
  t.equal(await fs.readFile(onDisk(`pvc-${UID(3)}/d/f`), 'utf8'), 'upstream data', 'the listed handle restores');
  t.ok(await fs.stat(onDisk(`${name}/pvc-${UID(2)}.tar.gz`)), 'the archive stays');
  await c.deleteVolume({ volumeId: restored.volume?.volumeId ?? '', secrets: {} }, ctx);
});

t.test('restore records: young by the server ctime, then the dead one is removed through the gate', async (t) => {
  const src = (await c.createVolume(volReq(`pvc-${UID(10)}`), ctx)).volume?.volumeId ?? '';
  await fs.writeFile(onDisk(`pvc-${UID(10)}/data`), 'source data');
  const snap = (await c.createSnapshot({ name: 'snap-1', sourceVolumeId: src, secrets: {}, parameters: {} }, ctx))
    .snapshot;
  // What killed restores leave: a record whose claim was never made, one beside a partial claim.
  const gone = `.snapshots/.restore-pvc-${UID(11)}`;
  const half = `.snapshots/.restore-pvc-${UID(12)}`;
  await fs.mkdir(onDisk(gone));
  await fs.mkdir(onDisk(half));
  await fs.mkdir(onDisk(`pvc-${UID(12)}`));
  await fs.writeFile(onDisk(`pvc-${UID(12)}/data`), 'sour');
  const old = new Date(Date.now() - 48 * 3_600_000);
  for (const p of [gone, half, `pvc-${UID(12)}/data`, `pvc-${UID(12)}`]) await fs.utimes(onDisk(p), old, old);

  const markers = (f: Finding[]) => summary(f.filter((x) => x.kind === 'restore-marker'));
  t.match(
    markers(await judge(60_000)),
    [
      ['restore-marker', gone, /grace period/],
      ['restore-marker', half, /claim directory exists/],
    ],
    'young by ctime (mtime set back does not count)',
  );
  await new Promise((r) => setTimeout(r, 1_500));
  const found = await judge(1_000);
  t.match(markers(found), [
    ['restore-marker', gone, 'remove-restore-marker'],
    ['restore-marker', half, /claim directory exists/],
  ]);
  const ctxFix = await fixCtx();
  const action = found.find((f) => f.what === gone)?.action;
  if (!action) return t.fail('no action for the dead restore’s record');
  t.equal(await runAction(ctxFix, action), 'removed');
  await t.rejects(fs.stat(onDisk(gone)), 'the record is gone on the server');
  t.ok(await fs.stat(onDisk(half)), 'the one beside a partial claim stays');

  // The partial claim is an orphaned claim (no PV; kept under this layout, which proves no name):
  // removed by hand, its record is a leftover on the next run.
  t.match(summary(found.filter((f) => f.what === `pvc-${UID(12)}`)), [['orphan-dir', `pvc-${UID(12)}`, /prove/]]);
  await fs.rm(onDisk(`pvc-${UID(12)}`), { recursive: true });
  const next = (await judge(1_000)).find((f) => f.what === half)?.action;
  if (!next) return t.fail('the record of the removed partial claim is no leftover');
  t.equal(await runAction(ctxFix, next), 'removed');
  t.same(await fs.readdir(onDisk('.snapshots')), ['snap-1'], 'only the snapshot is left');

  // The claim whose restore died restores cleanly now, and leaves only its filled record.
  await c.createVolume(volReq(`pvc-${UID(12)}`, { snapshot: { snapshotId: snap?.snapshotId ?? '' } }), ctx);
  t.equal(await fs.readFile(onDisk(`pvc-${UID(12)}/data`), 'utf8'), 'source data');
  t.same((await fs.readdir(onDisk('.snapshots'))).sort(), [`.filled-pvc-${UID(12)}@pvc-${UID(12)}`, 'snap-1']);
  t.same(
    summary((await judge(1_000)).filter((f) => f.kind !== 'orphan-dir' && f.kind !== 'upstream-snapshot')),
    [['nfs-snapshot', '.snapshots/snap-1', undefined]],
    'report finds the snapshot and nothing else of the restores',
  );
});
