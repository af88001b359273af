// The folders the NFS driver keeps for itself on a share (.snapshots, archived-*) are never a
// claim: a class naming one is refused before anything is read, and a volume or snapshot handle
// naming one — either handle form, the share or the subDir, any case — changes nothing.
import t from 'tap';
import { pino } from 'pino';
import type { CallContext, CreateVolumeRequest, VolumeCapability } from '../../../../src/csi/types.js';
import { createNfsController } from '../../../../src/nfs/controller/controller.js';
import { implemented } from '../../../helpers/implemented.js';
import { outcomeText } from '../../../helpers/outcome.js';
import { FakeStores } from './fake-store.js';

const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const SERVER = 'nas.local';
const SHARE = '/volume1/k8s-volumes/talos';
const S = SHARE.slice(1);
const cap = { mount: { fsType: '', mountFlags: [], volumeMountGroup: '' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };

function volReq(name: string, parameters: Record<string, string>): CreateVolumeRequest {
  return {
    name,
    capacityRange: { requiredBytes: '1024', limitBytes: '0' },
    volumeCapabilities: [cap as unknown as VolumeCapability],
    parameters: { server: SERVER, share: SHARE, ...parameters },
    secrets: {},
    volumeContentSource: null,
    accessibilityRequirements: null,
    mutableParameters: {},
  };
}

async function world() {
  const stores = new FakeStores();
  stores.put(SERVER, SHARE);
  const c = implemented(createNfsController({ log: pino({ level: 'silent' }), callTimeoutMs: 1000, stores }), [
    'createSnapshot',
    'deleteSnapshot',
    'controllerExpandVolume',
  ]);
  const vol = (await c.createVolume(volReq('pvc-a', {}), ctx)).volume?.volumeId ?? '';
  await stores.open(SERVER, SHARE).ensureDir('pvc-a/data', {});
  await c.createSnapshot({ name: 'snap-1', sourceVolumeId: vol, secrets: {}, parameters: {} }, ctx);
  stores.put(SERVER, `${SHARE}/archived-pvc-old/keep`);
  // What is on the server: every path below the share, sorted.
  const tree = async () => {
    const out: string[] = [];
    const walk = async (p: string): Promise<void> => {
      for (const e of await stores.open(SERVER, SHARE).list(p)) {
        const q = p ? `${p}/${e.name}` : e.name;
        out.push(q);
        if (e.type === 'dir') await walk(q);
      }
    };
    await walk('');
    return out.sort();
  };
  return { stores, c, vol, tree };
}

t.test('CreateVolume refuses a class whose subDir or share is a folder the driver keeps', async (t) => {
  const { stores, c, tree } = await world();
  const before = await tree();
  const cases: Array<[string, Record<string, string>]> = [
    ['subDir .snapshots', { subDir: '.snapshots' }],
    ['subDir .snapshots/${pv.metadata.name}', { subDir: '.snapshots/${pv.metadata.name}' }],
    ['subDir .Snapshots/x', { subDir: '.Snapshots/x' }],
    ['subDir ns/.snapshots', { subDir: 'ns/.snapshots' }],
    ['subDir archived-pvc-old', { subDir: 'archived-pvc-old' }],
    ['share …/.snapshots', { share: `${SHARE}/.snapshots`, subDir: 'snap-1' }],
  ];
  for (const [what, params] of cases) {
    stores.calls.length = 0;
    const r = volReq('pvc-new', { ...params, 'csi.storage.k8s.io/pv/name': 'pvc-new' });
    t.match(await outcomeText(c.createVolume(r, ctx)), /^InvalidArgument: .*keeps that name for itself/, what);
    t.same(stores.calls, [], `${what}: nothing was read`);
  }
  t.match(
    await outcomeText(c.createVolume(volReq('.snapshots', {}), ctx)),
    /^InvalidArgument/,
    'volume name .snapshots',
  );
  t.same(await tree(), before, 'nothing changed');
});

t.test('DeleteVolume of a handle naming .snapshots or an archive changes nothing', async (t) => {
  const { c, tree } = await world();
  const before = await tree();
  t.ok(before.includes('.snapshots/snap-1/tree/data'), 'the snapshot is there');
  const handles = [
    `${SERVER}#${S}#.snapshots##`,
    `${SERVER}#${S}#.snapshots#pvc-x#`,
    `${SERVER}#${S}#.snapshots/snap-1#pvc-x#`,
    `${SERVER}#${S}#.snapshots/snap-1/tree##`,
    `${SERVER}#${S}#.snapshots##archive`,
    `${SERVER}#${S}/.snapshots#snap-1##`,
    `${SERVER}#${S}/.snapshots/#snap-1/##`,
    `${SERVER}/${S}/.snapshots`,
    `${SERVER}/${S}/.snapshots/snap-1`,
    `${SERVER}#${S}#archived-pvc-old##`,
    `${SERVER}#${S}#archived-pvc-old/keep##archive`,
  ];
  for (const volumeId of handles) {
    t.same(await c.deleteVolume({ volumeId, secrets: {} }, ctx), {}, `${volumeId}: OK, an unknown volume`);
    t.same(await tree(), before, `${volumeId}: nothing changed`);
    t.match(
      await outcomeText(
        c.controllerExpandVolume({ volumeId, capacityRange: { requiredBytes: '1', limitBytes: '0' } } as never, ctx),
      ),
      /^NotFound/,
      `${volumeId}: no claim to expand`,
    );
  }
});

t.test(
  'snapshots and clones of a handle naming .snapshots are refused; snapshot handles in it change nothing',
  async (t) => {
    const { c, tree } = await world();
    const before = await tree();
    const inStore = `${SERVER}#${S}#.snapshots/snap-1/tree##`;
    t.match(
      await outcomeText(
        c.createSnapshot({ name: 'snap-2', sourceVolumeId: inStore, secrets: {}, parameters: {} }, ctx),
      ),
      /^NotFound: .*names no claim/,
    );
    const clone = { ...volReq('pvc-c', {}), volumeContentSource: { volume: { volumeId: inStore } } };
    t.match(await outcomeText(c.createVolume(clone, ctx)), /^NotFound: .*names no claim/);
    for (const snapshotId of [
      `nfs-snapshot/1#${SERVER}#${S}/.snapshots#snap-1`,
      `${SERVER}#${S}/.snapshots#snap-1#snap-1#tree`,
      `${SERVER}#${S}#.snapshots#.snapshots#snap-1`,
    ]) {
      t.same(await c.deleteSnapshot({ snapshotId, secrets: {} }, ctx), {}, snapshotId);
      t.same(await tree(), before, `${snapshotId}: nothing changed`);
    }
  },
);

t.test('a .snapshots that is not a directory refuses DeleteVolume before the claim is touched', async (t) => {
  const stores = new FakeStores();
  stores.put(SERVER, SHARE);
  const c = createNfsController({ log: pino({ level: 'silent' }), callTimeoutMs: 1000, stores });
  const vol = (await c.createVolume(volReq('pvc-a', {}), ctx)).volume?.volumeId ?? '';
  stores.put(SERVER, `${SHARE}/.snapshots`, 'file');
  t.match(
    await outcomeText(c.deleteVolume({ volumeId: vol, secrets: {} }, ctx)),
    /^FailedPrecondition: .*\.snapshots is a file, not the directory where the driver keeps snapshots.*nothing was changed/,
  );
  t.ok(await stores.open(SERVER, SHARE).stat('pvc-a'), 'the claim is still there');
  t.ok((await c.createVolume(volReq('pvc-b', {}), ctx)).volume?.volumeId, 'a plain CreateVolume is not held up by it');
});
