// NFS controller logic against the in-memory store: parameters, idempotency, delete policies,
// archive collisions, capabilities.
import t from 'tap';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../../../../src/csi/types.js';
import { isCsiError, Unavailable } from '../../../../src/errors.js';
import { createNfsController } from '../../../../src/nfs/controller/controller.js';
import { validate } from '../../../../src/csi/validate.js';
import { _csi_v1_VolumeCapability_AccessMode_Mode } from '../../../../src/gen/csi/v1/VolumeCapability.js';
import { implemented } from '../../../helpers/implemented.js';
import { present } from '../../../helpers/present.js';
import { FakeStores } from './fake-store.js';
import { createdId } from '../../../helpers/created.js';

const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const SERVER = 'nas.local';
const SHARE = '/volume1/k8s-volumes/talos';

const cap = (mode = 'MULTI_NODE_MULTI_WRITER'): VolumeCapability =>
  ({
    mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
    accessMode: { mode },
    accessType: 'mount',
  }) as VolumeCapability;

function req(
  name: string,
  parameters: Record<string, string>,
  extra: Partial<CreateVolumeRequest> = {},
): CreateVolumeRequest {
  return {
    name,
    capacityRange: { requiredBytes: String(1 << 30), limitBytes: '0' },
    volumeCapabilities: [cap()],
    parameters,
    secrets: {},
    volumeContentSource: null,
    accessibilityRequirements: null,
    mutableParameters: {},
    ...extra,
  };
}

const seedParams = (ns: string, pvc: string, pv: string, extra: Record<string, string> = {}) => ({
  server: SERVER,
  share: SHARE,
  subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
  onDelete: 'archive',
  'csi.storage.k8s.io/pvc/namespace': ns,
  'csi.storage.k8s.io/pvc/name': pvc,
  'csi.storage.k8s.io/pv/name': pv,
  ...extra,
});

async function errKind(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'no error';
  } catch (e) {
    return isCsiError(e) ? `${e.kind}: ${e.message}` : `not a CsiError: ${String(e)}`;
  }
}

function setup(now = new Date('2026-03-01T12:00:00Z')) {
  const stores = new FakeStores();
  stores.put(SERVER, SHARE);
  const c = implemented(
    createNfsController({ log: pino({ level: 'silent' }), callTimeoutMs: 1000, stores, now: () => now }),
    ['controllerExpandVolume'],
  );
  return { stores, c };
}

t.test('capabilities advertise only what works', async (t) => {
  const { c } = setup();
  t.same([...c.capabilities].sort(), [
    'CLONE_VOLUME',
    'CREATE_DELETE_SNAPSHOT',
    'CREATE_DELETE_VOLUME',
    'EXPAND_VOLUME',
    'LIST_SNAPSHOTS',
    'SINGLE_NODE_MULTI_WRITER',
  ]);
  t.equal(c.listVolumes, undefined);
  t.equal(c.getCapacity, undefined);
  t.equal(c.controllerPublishVolume, undefined);
});

t.test('CreateVolume makes <namespace>/<pvc> with owner and mode, and the upstream handle', async (t) => {
  const { c, stores } = setup();
  const res = await c.createVolume(
    req(
      'pvc-0b1c',
      seedParams('monitoring', 'grafana', 'pvc-0b1c', { uid: '472', gid: '472', mountPermissions: '0770' }),
    ),
    ctx,
  );
  t.equal(res.volume?.volumeId, 'nas.local#volume1/k8s-volumes/talos#monitoring/grafana#pvc-0b1c#archive');
  t.equal(res.volume?.capacityBytes, 1 << 30);
  t.same(res.volume?.volumeContext, {
    server: SERVER,
    share: SHARE,
    subDir: 'monitoring/grafana',
    mountPermissions: '0770',
  });
  const d = stores.get(SERVER, `${SHARE}/monitoring/grafana`);
  t.match(d, { type: 'dir', mode: 0o770, uid: 472, gid: 472 });
  t.match(stores.get(SERVER, `${SHARE}/monitoring`), { mode: 0o755, uid: 0 }, 'parents are root 0755');

  const again = await c.createVolume(
    req(
      'pvc-0b1c',
      seedParams('monitoring', 'grafana', 'pvc-0b1c', { uid: '472', gid: '472', mountPermissions: '0770' }),
    ),
    ctx,
  );
  t.same(again, res, 'same name and parameters: same answer');
});

t.test('without subDir the directory is the PV name and the handle has no uuid', async (t) => {
  const { c, stores } = setup();
  const res = await c.createVolume(req('pvc-7', { server: SERVER, share: SHARE }), ctx);
  t.equal(res.volume?.volumeId, 'nas.local#volume1/k8s-volumes/talos#pvc-7##');
  t.same(res.volume?.volumeContext, { server: SERVER, share: SHARE, subDir: 'pvc-7' });
  t.match(stores.get(SERVER, `${SHARE}/pvc-7`), { type: 'dir', mode: 0o755 });
});

t.test('a repeated name with another capacity or parameters is AlreadyExists', async (t) => {
  const { c } = setup();
  await c.createVolume(req('v1', { server: SERVER, share: SHARE }), ctx);
  const twiceAsBig = req(
    'v1',
    { server: SERVER, share: SHARE },
    { capacityRange: { requiredBytes: String(2 * 2 ** 30), limitBytes: '0' } },
  );
  t.match(await errKind(c.createVolume(twiceAsBig, ctx)), /^AlreadyExists: volume "v1"/);
  t.match(
    await errKind(c.createVolume(req('v1', { server: SERVER, share: SHARE, onDelete: 'retain' }), ctx)),
    /^AlreadyExists/,
  );
  const del = await c.createVolume(req('v1', { server: SERVER, share: SHARE }), ctx);
  await c.deleteVolume({ volumeId: present(del.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx);
  t.equal(await errKind(c.createVolume(twiceAsBig, ctx)), 'no error', 'after DeleteVolume the name is free again');
});

t.test('CreateVolume input errors', async (t) => {
  const { c, stores } = setup();
  t.match(await errKind(c.createVolume(req('v', {}), ctx)), /^InvalidArgument: parameter "server" is required/);
  t.match(
    await errKind(c.createVolume(req('v', { server: SERVER, foo: 'bar' }), ctx)),
    /^InvalidArgument: unknown parameter "foo"/,
  );
  t.match(await errKind(c.createVolume(req('v', { server: SERVER, subDir: '../x' }), ctx)), /^InvalidArgument/);
  const block = { block: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' }, accessType: 'block' } as VolumeCapability;
  t.match(
    await errKind(c.createVolume(req('v', { server: SERVER }, { volumeCapabilities: [block] }), ctx)),
    /^InvalidArgument: block access type/,
  );
  // Required fields are the CSI service's check (src/csi/validate.ts), made before the backend runs.
  t.throws(() => validate.createVolume(req('v', { server: SERVER }, { volumeCapabilities: [] })), {
    message: /volume_capabilities is required/,
  });
  t.match(
    await errKind(c.createVolume(req('v', { server: SERVER }, { volumeCapabilities: [cap('UNKNOWN')] }), ctx)),
    /^InvalidArgument: access mode UNKNOWN/,
  );
  t.match(
    await errKind(
      c.createVolume(req('v', { server: SERVER }, { capacityRange: { requiredBytes: '10', limitBytes: '5' } }), ctx),
    ),
    /^OutOfRange/,
  );
  t.equal(stores.calls.filter((x) => x.startsWith('ensureDir')).length, 0, 'nothing touched the NAS');
  // Every mode the CSI spec defines (as generated from proto/csi.proto) but UNKNOWN: an NFS directory serves them all.
  for (const mode of Object.keys(_csi_v1_VolumeCapability_AccessMode_Mode).filter((m) => m !== 'UNKNOWN')) {
    t.equal(
      await errKind(
        c.createVolume(
          req(`m-${mode.toLowerCase()}`, { server: SERVER, share: SHARE }, { volumeCapabilities: [cap(mode)] }),
          ctx,
        ),
      ),
      'no error',
      mode,
    );
  }
});

t.test('NAS errors pass through typed', async (t) => {
  const { c, stores } = setup();
  stores.failWith('ensureDir', new Unavailable('NFS server nas.local:2049 did not answer MKDIR within 1000 ms'));
  t.match(await errKind(c.createVolume(req('v', { server: SERVER, share: SHARE }), ctx)), /^Unavailable: NFS server/);
  t.equal(
    await errKind(c.createVolume(req('v', { server: SERVER, share: SHARE }), ctx)),
    'no error',
    'a retry succeeds',
  );
});

t.test('onDelete=delete removes the directory and empty parents below the share only', async (t) => {
  const { c, stores } = setup();
  const p = (pvc: string) => seedParams('apps', pvc, `pv-${pvc}`, { onDelete: 'delete' });
  const a = await c.createVolume(req('pv-a', p('a')), ctx);
  const b = await c.createVolume(req('pv-b', p('b')), ctx);
  stores.put(SERVER, `${SHARE}/apps/a/data/deep`);
  stores.put(SERVER, `${SHARE}/apps/a/file.txt`, 'file');
  t.equal(
    a.volume?.volumeId,
    'nas.local#volume1/k8s-volumes/talos#apps/a#pv-a#',
    'delete is not recorded in the handle',
  );

  await c.deleteVolume({ volumeId: present(a.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx);
  t.equal(stores.get(SERVER, `${SHARE}/apps/a`), undefined);
  t.ok(stores.get(SERVER, `${SHARE}/apps/b`), 'sibling claim untouched');
  t.ok(stores.get(SERVER, `${SHARE}/apps`), 'non-empty parent kept');

  await c.deleteVolume({ volumeId: present(b.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx);
  t.equal(stores.get(SERVER, `${SHARE}/apps`), undefined, 'emptied parent removed');
  t.ok(stores.get(SERVER, SHARE), 'share root never removed');
  t.notOk(
    stores.calls.some((x) => x === 'removeDirIfEmpty ' || (x.startsWith('removeTree ') && !x.includes('/'))),
    'never aimed at the share root',
  );

  await c.deleteVolume({ volumeId: present(b.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx);
  t.pass('deleting again succeeds');
});

t.test('onDelete=retain keeps everything', async (t) => {
  const { c, stores } = setup();
  const v = await c.createVolume(req('pv-r', seedParams('ns', 'keep', 'pv-r', { onDelete: 'retain' })), ctx);
  t.match(v.volume?.volumeId, /#retain$/);
  const before = stores.calls.length;
  await c.deleteVolume({ volumeId: present(v.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx);
  t.ok(stores.get(SERVER, `${SHARE}/ns/keep`));
  t.equal(stores.calls.length, before, 'no NAS call at all');
});

t.test('onDelete=archive renames to archived-<subDir>; a collision gets a unique name', async (t) => {
  const now = new Date('2026-03-01T12:00:00Z');
  const { c, stores } = setup(now);
  const first = await c.createVolume(req('pv-1', seedParams('db', 'data-pg-0', 'pv-1')), ctx);
  stores.put(SERVER, `${SHARE}/db/data-pg-0/PG_VERSION`, 'file');
  await c.deleteVolume({ volumeId: present(first.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx);
  t.equal(stores.get(SERVER, `${SHARE}/db/data-pg-0`), undefined);
  t.ok(stores.get(SERVER, `${SHARE}/archived-db/data-pg-0/PG_VERSION`), 'archived with its data');

  // The same claim is created again and deleted again: the seed's stuck delete.
  const second = await c.createVolume(req('pv-2', seedParams('db', 'data-pg-0', 'pv-2')), ctx);
  stores.put(SERVER, `${SHARE}/db/data-pg-0/second`, 'file');
  await c.deleteVolume({ volumeId: present(second.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx);
  t.ok(stores.get(SERVER, `${SHARE}/archived-db/data-pg-0/PG_VERSION`), 'first archive not overwritten');
  t.ok(
    stores.get(SERVER, `${SHARE}/archived-db/data-pg-0-20260301T120000Z/second`),
    'second archive under a suffixed name',
  );

  // A third one within the same second.
  const third = await c.createVolume(req('pv-3', seedParams('db', 'data-pg-0', 'pv-3')), ctx);
  stores.put(SERVER, `${SHARE}/db/data-pg-0/third`, 'file');
  await c.deleteVolume({ volumeId: present(third.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx);
  t.ok(stores.get(SERVER, `${SHARE}/archived-db/data-pg-0-20260301T120000Z-2/third`));

  // An empty one (a CreateVolume that came after its claim was archived) holds nothing to keep.
  const late = await c.createVolume(req('pv-4', seedParams('db', 'data-pg-0', 'pv-4')), ctx);
  await c.deleteVolume({ volumeId: present(late.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx);
  t.equal(stores.get(SERVER, `${SHARE}/db/data-pg-0`), undefined, 'removed');
  t.equal(stores.get(SERVER, `${SHARE}/archived-db/data-pg-0-20260301T120000Z-3`), undefined, 'not archived empty');

  await c.deleteVolume({ volumeId: present(third.volume?.volumeId, 'CreateVolume: volume id'), secrets: {} }, ctx);
  t.pass('a retried archive delete succeeds with nothing left to move');
});

t.test('handles of existing PVs work, including the old slash form', async (t) => {
  const { c, stores } = setup();
  stores.put(SERVER, `${SHARE}/pvc-old`);
  await c.deleteVolume({ volumeId: `${SERVER}/volume1/k8s-volumes/talos/pvc-old`, secrets: {} }, ctx);
  t.equal(stores.get(SERVER, `${SHARE}/pvc-old`), undefined, 'legacy handle: default policy delete');

  stores.put(SERVER, `${SHARE}/ns/claim`);
  await c.deleteVolume({ volumeId: `${SERVER}#volume1/k8s-volumes/talos#ns/claim#pvc-1234#archive`, secrets: {} }, ctx);
  t.ok(stores.get(SERVER, `${SHARE}/archived-ns/claim`), 'an upstream-created archive handle archives');
});

t.test(
  'legacy handles without onDelete follow the configured default (csi-driver-nfs --default-ondelete-policy)',
  async (t) => {
    const legacy = [
      `${SERVER}/volume1/k8s-volumes/talos/pvc-old`,
      `${SERVER}#volume1/k8s-volumes/talos#ns/claim#pvc-5678`,
      `${SERVER}#volume1/k8s-volumes/talos#pvc-4`,
    ];
    const dirs = [`${SHARE}/pvc-old`, `${SHARE}/ns/claim`, `${SHARE}/pvc-4`];
    for (const policy of ['retain', 'archive', 'delete'] as const) {
      const stores = new FakeStores();
      stores.put(SERVER, SHARE);
      for (const d of dirs) stores.put(SERVER, d);
      const c = createNfsController({
        log: pino({ level: 'silent' }),
        callTimeoutMs: 1000,
        stores,
        defaultOnDelete: policy,
        now: () => new Date('2026-03-01T12:00:00Z'),
      });
      for (const id of legacy) await c.deleteVolume({ volumeId: id, secrets: {} }, ctx);
      const left = dirs.filter((d) => stores.get(SERVER, d));
      const archived = ['archived-pvc-old', 'archived-ns/claim', 'archived-pvc-4'].filter((d) =>
        stores.get(SERVER, `${SHARE}/${d}`),
      );
      if (policy === 'retain') t.same(left, dirs, 'retain: every directory kept');
      if (policy === 'archive') t.same([left, archived.length], [[], 3], 'archive: every directory archived');
      if (policy === 'delete') t.same([left, archived.length], [[], 0], 'delete: removed');
      // a handle that records its policy keeps it whatever the default
      stores.put(SERVER, `${SHARE}/kept`);
      await c.deleteVolume({ volumeId: `${SERVER}#volume1/k8s-volumes/talos#kept#pv-k#retain`, secrets: {} }, ctx);
      t.ok(stores.get(SERVER, `${SHARE}/kept`), `${policy}: the handle's own retain wins`);
      // and a new volume without onDelete records the default in its handle, as upstream does
      const v = await c.createVolume(req(`pv-new-${policy}`, { server: SERVER, share: SHARE }), ctx);
      t.equal(
        (v.volume?.volumeId ?? '').split('#')[4] ?? '',
        policy === 'delete' ? '' : policy,
        `${policy}: recorded in new handles`,
      );
    }
  },
);

t.test('unknown or malformed ids: DeleteVolume succeeds without touching anything', async (t) => {
  const { c, stores } = setup();
  stores.put(SERVER, `${SHARE}/keep`);
  for (const id of [
    'some-id',
    `${SERVER}#volume1/k8s-volumes/talos##`,
    `${SERVER}#volume1#../talos#`,
    `${SERVER}#x#y#z#shred`,
  ]) {
    t.equal(await errKind(c.deleteVolume({ volumeId: id, secrets: {} }, ctx)), 'no error', id);
  }
  t.equal(stores.calls.length, 0);
  t.throws(() => validate.deleteVolume({ volumeId: '', secrets: {} }), { message: /volume_id is required/ });
});

t.test('ValidateVolumeCapabilities and ControllerExpandVolume', async (t) => {
  const { c } = setup();
  const v = await c.createVolume(req('pv-x', { server: SERVER, share: SHARE }), ctx);
  const id = present(v.volume?.volumeId, 'CreateVolume: volume id');
  const ok = await c.validateVolumeCapabilities(
    {
      volumeId: id,
      volumeCapabilities: [cap('SINGLE_NODE_WRITER')],
      volumeContext: {},
      parameters: {},
      secrets: {},
      mutableParameters: {},
    },
    ctx,
  );
  t.equal(ok.confirmed?.volumeCapabilities?.length, 1);
  const block = { block: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' }, accessType: 'block' } as VolumeCapability;
  const no = await c.validateVolumeCapabilities(
    {
      volumeId: id,
      volumeCapabilities: [block],
      volumeContext: {},
      parameters: {},
      secrets: {},
      mutableParameters: {},
    },
    ctx,
  );
  t.notOk(no.confirmed);
  t.match(no.message, /block/);
  const missing = (volumeId: string) =>
    errKind(
      c.validateVolumeCapabilities(
        {
          volumeId,
          volumeCapabilities: [cap()],
          volumeContext: {},
          parameters: {},
          secrets: {},
          mutableParameters: {},
        },
        ctx,
      ),
    );
  t.match(await missing(`${SERVER}#volume1/k8s-volumes/talos#nope##`), /^NotFound: .*talos\/nope does not exist/);
  t.match(await missing('garbage'), /^NotFound/);

  const grown = await c.controllerExpandVolume(
    {
      volumeId: id,
      capacityRange: { requiredBytes: String(5 << 30), limitBytes: '0' },
      secrets: {},
      volumeCapability: null,
    },
    ctx,
  );
  t.same(grown, { capacityBytes: 5 << 30, nodeExpansionRequired: false });
  t.throws(
    () => validate.controllerExpandVolume({ volumeId: id, capacityRange: null, secrets: {}, volumeCapability: null }),
    { message: /capacity_range is required/ },
  );
  t.match(
    await errKind(
      c.controllerExpandVolume(
        {
          volumeId: `${SERVER}#x#gone##`,
          capacityRange: { requiredBytes: '1', limitBytes: '0' },
          secrets: {},
          volumeCapability: null,
        },
        ctx,
      ),
    ),
    /^NotFound/,
  );
});

t.test('probe reflects the NAS', async (t) => {
  const { c, stores } = setup();
  t.equal(await c.probe(new AbortController().signal), true);
  stores.down = true;
  t.equal(await c.probe(new AbortController().signal), false);
});

t.test('negative or inverted sizes are OUT_OF_RANGE in the NFS driver too (shared parser)', async (t) => {
  const { c } = setup();
  const params = seedParams('default', 'neg', 'pvc-neg');
  for (const range of [
    { requiredBytes: '-1', limitBytes: '0' },
    { requiredBytes: '0', limitBytes: '-5' },
    { requiredBytes: '10', limitBytes: '5' },
  ]) {
    await t.rejects(
      c.createVolume(req('pvc-neg', params, { capacityRange: range }), ctx),
      { kind: 'OutOfRange', message: /out of range|below/ },
      `create ${JSON.stringify(range)}`,
    );
  }
  const id = await createdId(c.createVolume(req('pvc-neg', params), ctx));
  await t.rejects(
    c.controllerExpandVolume(
      { volumeId: id, capacityRange: { requiredBytes: '-1', limitBytes: '0' }, secrets: {}, volumeCapability: null },
      ctx,
    ),
    { kind: 'OutOfRange', message: /out of range|below/ },
  );
});
