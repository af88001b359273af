// A restored or cloned volume (`vm-<volume VM>-disk-0`, owned by one of our volume VMs, see
// docs/snapshots.md) is the driver's own for ControllerExpandVolume and ControllerModifyVolume,
// exactly when its owner VM carries our volume VM's name and a record of this controller: the
// ownership gate reads that VM at decision time. Every other owner is refused as before, and
// the driver's helper VMs are never borrowed to resize a disk offline.
import t from 'tap';
import pino from 'pino';
import type * as T from '../../../../../src/csi/types.js';
import { GiB } from '../../../../../src/proxmox/controller/params/params.js';
import { type CopyRecord, formatRecord } from '../../../../../src/proxmox/controller/safety/copy-vms.js';
import { type FakeProxmox, seedCluster } from '../../api/fake-api.js';
import { controllerOn } from '../../fake-controller.js';
import { MOUNT, expandReq, publishReq } from '../../../../helpers/csi-requests.js';
import { kindOf } from '../../../../helpers/outcome.js';

const ctx = (): T.CallContext => ({ log: pino({ level: 'silent' }), signal: new AbortController().signal });
const R = 812_345_678;
const DISK = `vm-${R}-disk-0`;
const ID = `homelab/hyper2/local-lvm/${DISK}`;

interface VolumeVm {
  name?: string;
  record?: Partial<CopyRecord> | null;
}

/** The seed cluster plus a volume VM R on hyper2 that owns DISK and references none (a finished restore). */
function setup(o: VolumeVm = {}, f: FakeProxmox = seedCluster()) {
  const vm = f.addVm({ vmid: R, name: o.name ?? 'pve-nfs-csi-volume', node: 'hyper2', running: false });
  vm.config.delete('scsi0');
  vm.config.set('unused0', `local-lvm:vm-${R}-pve-nfs-csi-released-disk-0`);
  if (o.record !== null) {
    const record = { role: 'volume', controller: 9999, name: 'pvc-r', source: 'x', created: 1, ...o.record };
    vm.config.set('description', formatRecord(record as CopyRecord));
  }
  const vols = f.storageOf('hyper2', 'local-lvm').volumes;
  vols.set(DISK, GiB);
  return { f, c: controllerOn(f), vols };
}

const expand = (c: ReturnType<typeof setup>['c'], bytes: number) =>
  c.controllerExpandVolume(expandReq(ID, bytes, MOUNT), ctx());
const modify = (c: ReturnType<typeof setup>['c']) =>
  c.controllerModifyVolume({ volumeId: ID, mutableParameters: { backup: 'false' }, secrets: {} }, ctx());

t.test('expand offline: grown through a node VM, never through the volume VM', async (t) => {
  const { f, c, vols } = setup();
  f.vmOf(104).running = false;
  const r = await expand(c, 2 * GiB);
  t.equal(r.capacityBytes, String(2 * GiB));
  t.equal(vols.get(DISK), 2 * GiB);
  const resized = f.calls.filter((x) => x.method === 'resizeDisk').map((x) => x.args[1]);
  t.same(resized, [104], 'through the stopped node VM 104');
  t.notOk(
    [...f.vmOf(104).config.values()].some((v) => v.includes(DISK)),
    'the helper attachment is gone',
  );
});

t.test('expand online: through the worker it is published to', async (t) => {
  const { f, c, vols } = setup();
  await c.controllerPublishVolume(publishReq(ID, 'talos-worker-2', { storage: 'local-lvm' }), ctx());
  await expand(c, 3 * GiB);
  t.equal(vols.get(DISK), 3 * GiB);
  t.same(
    f.calls.filter((x) => x.method === 'resizeDisk').map((x) => x.args[1]),
    [104],
    'resized on the worker (talos-worker-2 is VM 104)',
  );
});

t.test('modify: the marker is owned by the volume VM, like its disk', async (t) => {
  const { f, c, vols } = setup();
  t.same(await modify(c), {});
  t.ok(vols.has(`${DISK}_vac1-b0`), 'marker beside the disk');
  const alloc = f.calls.find((x) => x.method === 'allocDisk')?.args[2] as { vmid: number } | undefined;
  t.equal(alloc?.vmid, R);
});

t.test('not ours: another name, another controller, no record, another role', async (t) => {
  for (const [what, o] of [
    ['another name', { name: 'restored' }],
    ['another controller', { record: { controller: 1234 } }],
    ['no record', { record: null }],
    ['a snapshot VM', { name: 'pve-nfs-csi-snapshot', record: { role: 'snapshot' } }],
  ] as Array<[string, VolumeVm]>) {
    const { f, c, vols } = setup(o);
    f.vmOf(104).running = false;
    t.equal(await kindOf(expand(c, 2 * GiB)), 'FailedPrecondition', `expand: ${what}`);
    t.equal(await kindOf(modify(c)), 'FailedPrecondition', `modify: ${what}`);
    t.equal(vols.get(DISK), GiB, 'not grown');
    t.same(
      [...vols.keys()].filter((k) => /[_+]vac/.test(k)),
      [],
      'no marker',
    );
  }
});

t.test("offline expansion never borrows the driver's helper VMs", async (t) => {
  const f = seedCluster();
  const snap = f.addVm({ vmid: 800_000_001, name: 'pve-nfs-csi-snapshot', node: 'hyper2', running: false });
  snap.config.set('scsi0', 'local-lvm:vm-800000001-disk-0,size=1G');
  const { c, vols } = setup({}, f);
  f.storageOf('hyper2', 'local-lvm').volumes.set('vm-9999-pvc-plain', GiB);
  await c.controllerExpandVolume(expandReq('homelab/hyper2/local-lvm/vm-9999-pvc-plain', 2 * GiB, MOUNT), ctx());
  await expand(c, 2 * GiB);
  t.equal(vols.get('vm-9999-pvc-plain'), 2 * GiB);
  const resized = f.calls.filter((x) => x.method === 'resizeDisk').map((x) => x.args[1] as number);
  t.equal(resized.length, 2);
  t.notOk(
    resized.some((v) => v >= 800_000_000),
    `resized through node VMs only (${resized.join(', ')})`,
  );
});
