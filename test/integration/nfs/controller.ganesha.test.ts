// The NFS controller backend end to end against a real nfs-ganesha: the seed's StorageClass
// (<namespace>/<pvc> under /volume1/k8s-volumes/talos, onDelete archive) plus uid/gid, the
// delete policy's parent clean-up, and handles of volumes upstream created.
import t from 'tap';
import fs from 'node:fs/promises';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../../../src/csi/types.js';
import { isCsiError } from '../../../src/errors.js';
import { createNfsController } from '../../../src/nfs/controller/controller.js';
import { startTalosExport } from '../../helpers/ganesha-export.js';

const { g, onDisk: disk } = await startTalosExport(t);
const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
let clock = new Date('2026-05-01T08:00:00Z');
const c = createNfsController({
  log: pino({ level: 'silent' }),
  callTimeoutMs: 3000,
  nfsPort: g.nfsPort,
  mountPort: g.mountPort,
  now: () => clock,
});
t.teardown(() => c.close());

const SHARE = '/volume1/k8s-volumes/talos';
const cap: VolumeCapability = {
  mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' },
  accessType: 'mount',
};

function req(name: string, ns: string, pvc: string, extra: Record<string, string> = {}): CreateVolumeRequest {
  return {
    name,
    capacityRange: { requiredBytes: String(5 << 30), limitBytes: '0' },
    volumeCapabilities: [cap],
    parameters: {
      server: g.server,
      share: SHARE,
      subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
      onDelete: 'archive',
      'csi.storage.k8s.io/pvc/namespace': ns,
      'csi.storage.k8s.io/pvc/name': pvc,
      'csi.storage.k8s.io/pv/name': name,
      ...extra,
    },
    secrets: {},
    volumeContentSource: null,
    accessibilityRequirements: null,
    mutableParameters: {},
  };
}
const del = (volumeId: string) => c.deleteVolume({ volumeId, secrets: {} }, ctx);

t.test('CreateVolume: a non-root pod can write without an initContainer chown', async (t) => {
  const res = await c.createVolume(
    req('pvc-1111', 'logeverylift', 'data-postgres-0', { uid: '999', gid: '999', mountPermissions: '0750' }),
    ctx,
  );
  t.equal(res.volume?.volumeId, '127.0.0.1#volume1/k8s-volumes/talos#logeverylift/data-postgres-0#pvc-1111#archive');
  t.same(res.volume?.volumeContext, {
    server: '127.0.0.1',
    share: SHARE,
    subDir: 'logeverylift/data-postgres-0',
    mountPermissions: '0750',
  });
  const st = await fs.stat(disk('logeverylift/data-postgres-0'));
  t.equal(st.uid, 999);
  t.equal(st.gid, 999);
  t.equal(st.mode & 0o7777, 0o750);
  const again = await c.createVolume(
    req('pvc-1111', 'logeverylift', 'data-postgres-0', { uid: '999', gid: '999', mountPermissions: '0750' }),
    ctx,
  );
  t.same(again, res, 'idempotent');
  t.equal(await c.probe(new AbortController().signal), true);
});

t.test(
  'DeleteVolume archive: archived-<ns>/<pvc>, and a second archive of the same claim does not get stuck',
  async (t) => {
    const first = await c.createVolume(req('pvc-a1', 'media', 'config'), ctx);
    await fs.writeFile(disk('media/config/settings.xml'), 'one');
    await del(first.volume?.volumeId as string);
    t.equal(await fs.readFile(disk('archived-media/config/settings.xml'), 'utf8'), 'one');

    const second = await c.createVolume(req('pvc-a2', 'media', 'config'), ctx);
    t.same(await fs.readdir(disk('media/config')), [], 'a new claim with the same name starts empty');
    await fs.writeFile(disk('media/config/settings.xml'), 'two');
    await del(second.volume?.volumeId as string);
    t.equal(await fs.readFile(disk('archived-media/config/settings.xml'), 'utf8'), 'one', 'first archive kept');
    t.equal(await fs.readFile(disk('archived-media/config-20260501T080000Z/settings.xml'), 'utf8'), 'two');
    await del(second.volume?.volumeId as string);
    t.pass('repeated delete succeeds');
  },
);

t.test('DeleteVolume delete: recursive inside the volume, empty parents below the share removed', async (t) => {
  const a = await c.createVolume(req('pvc-d1', 'scratch', 'a', { onDelete: 'delete' }), ctx);
  const b = await c.createVolume(req('pvc-d2', 'scratch', 'b', { onDelete: 'delete' }), ctx);
  await fs.mkdir(disk('scratch/a/x/y'), { recursive: true });
  await fs.writeFile(disk('scratch/a/x/y/z'), 'z');
  await del(a.volume?.volumeId as string);
  await t.rejects(fs.stat(disk('scratch/a')), { code: 'ENOENT' });
  t.ok(await fs.stat(disk('scratch/b')), 'the other claim stays, so does their namespace directory');
  await del(b.volume?.volumeId as string);
  await t.rejects(fs.stat(disk('scratch')), { code: 'ENOENT' });
  t.ok(await fs.stat(disk('.')), 'share root (talos) kept');
});

t.test('handles of volumes upstream created', async (t) => {
  await fs.mkdir(disk('pvc-legacy'));
  await fs.writeFile(disk('pvc-legacy/f'), 'x');
  await del(`127.0.0.1/volume1/k8s-volumes/talos/pvc-legacy`);
  await t.rejects(fs.stat(disk('pvc-legacy')), { code: 'ENOENT' });

  await fs.mkdir(disk('apps/grafana'), { recursive: true });
  const id = '127.0.0.1#volume1/k8s-volumes/talos#apps/grafana#pvc-9f#archive';
  const ok = await c.validateVolumeCapabilities(
    { volumeId: id, volumeCapabilities: [cap], volumeContext: {}, parameters: {}, secrets: {}, mutableParameters: {} },
    ctx,
  );
  t.ok(ok.confirmed);
  clock = new Date('2026-05-02T09:30:00Z');
  await del(id);
  t.ok(await fs.stat(disk('archived-apps/grafana')));

  try {
    await c.validateVolumeCapabilities(
      {
        volumeId: id,
        volumeCapabilities: [cap],
        volumeContext: {},
        parameters: {},
        secrets: {},
        mutableParameters: {},
      },
      ctx,
    );
    t.fail('expected NotFound');
  } catch (e) {
    t.ok(isCsiError(e, 'NotFound'), String(e));
  }
  await del('127.0.0.1#volume1/k8s-volumes/talos#../../etc#x#');
  t.pass('a malicious handle is ignored, not followed');
});
