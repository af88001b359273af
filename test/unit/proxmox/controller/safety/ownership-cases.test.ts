// Regressions: the controller changed disks that are not its own (docs/ownership.md, "Proxmox:
// what the driver frees, grows, changes and attaches"). One host like the seed's hyper1 with
// running VMs 101 and 111 and a stopped VM 131; every case states which call must refuse and
// that nothing changed: no disk freed or resized, no VM config rewritten, no marker left.
import t from 'tap';
import { FakeProxmox } from '../../api/fake-api.js';
import { controllerOn } from '../../fake-controller.js';
import { callCtx, expandReq, publishReq, unpublishReq } from '../../../../helpers/csi-requests.js';
import { kindOf } from '../../../../helpers/outcome.js';

const GiB = 2 ** 30;
const H = 'homelab/hyper1/local-lvm/';

function cluster() {
  const f = new FakeProxmox();
  f.addNode('hyper1');
  f.addVm({ vmid: 101, name: 'talos-cp-1', node: 'hyper1' });
  f.addVm({ vmid: 111, name: 'talos-worker-1', node: 'hyper1' });
  f.addVm({ vmid: 131, name: 'spare', node: 'hyper1', running: false });
  const vols = f.storageOf('hyper1', 'local-lvm').volumes;
  const c = controllerOn(f);
  /** Every VM's config, pending section and every volume, to compare before and after. */
  const snapshot = () =>
    JSON.stringify({
      vms: [...f.vms.values()].map((v) => [v.vmid, [...v.config], [...v.pending], [...v.pendingDelete]]),
      vols: [...vols].sort(),
    });
  return { f, c, vols, snapshot };
}

const del = (c: ReturnType<typeof cluster>['c'], disk: string) =>
  kindOf(c.deleteVolume({ volumeId: H + disk, secrets: {} }, callCtx()));

t.test('DeleteVolume refuses a driver disk that any key of a VM config references', async (t) => {
  for (const [vmid, key, pending] of [
    [131, 'virtio2', false],
    [131, 'sata1', false],
    [131, 'ide2', false],
    [111, 'sata2', true],
  ] as const) {
    const { f, c, vols, snapshot } = cluster();
    vols.set('vm-9999-pvc-held', GiB);
    const vm = f.vmOf(vmid);
    (pending ? vm.pending : vm.config).set(key, 'local-lvm:vm-9999-pvc-held,size=1G');
    const before = snapshot();
    t.equal(await del(c, 'vm-9999-pvc-held'), 'FailedPrecondition', `${pending ? 'pending ' : ''}${key} of ${vmid}`);
    t.equal(snapshot(), before, 'nothing changed');
  }
});

t.test('DeleteVolume frees only disks of the driver naming scheme', async (t) => {
  const { c, vols, snapshot } = cluster();
  vols.set('vm-5555-disk-0', GiB);
  vols.set('vm-9999-disk-5', GiB);
  const before = snapshot();
  t.equal(await del(c, 'vm-5555-disk-0'), 'FailedPrecondition', 'a disk whose owner VM does not exist');
  t.equal(await del(c, 'vm-9999-disk-5'), 'FailedPrecondition', "Proxmox's own name for a disk of VM 9999");
  t.equal(snapshot(), before, 'both disks are still there');
});

t.test('DeleteVolume decides on a fresh read, not on cached VM configs', async (t) => {
  const { f, c, vols } = cluster();
  vols.set('vm-9999-pvc-hand', GiB);
  // A publish and unpublish read every VM of the host into the controller's caches.
  const id = H + 'vm-9999-pvc-hand';
  t.equal(await kindOf(c.controllerPublishVolume(publishReq(id, 'talos-worker-1'), callCtx())), 'ok');
  t.equal(await kindOf(c.controllerUnpublishVolume(unpublishReq(id, 'talos-worker-1'), callCtx())), 'ok');
  // Attached by hand (no task of the driver's token), within the cache window.
  f.vmOf(131).config.set('scsi7', 'local-lvm:vm-9999-pvc-hand,size=1G');
  t.equal(await del(c, 'vm-9999-pvc-hand'), 'FailedPrecondition', 'scsi7 of stopped VM 131 keeps it');
  t.ok(vols.has('vm-9999-pvc-hand'), 'not freed');
});

t.test('ControllerExpandVolume grows no foreign disk and never puts one on a second VM', async (t) => {
  const { f, c, vols, snapshot } = cluster();
  f.vmOf(131).config.set('scsi1', 'local-lvm:vm-131-disk-1,size=8G');
  f.vmOf(131).config.set('unused0', 'local-lvm:vm-131-disk-2');
  f.vmOf(111).config.set('virtio1', 'local-lvm:vm-111-disk-1,size=8G');
  for (const d of ['vm-131-disk-0', 'vm-131-disk-1', 'vm-131-disk-2', 'vm-111-disk-1']) vols.set(d, 8 * GiB);
  vols.set('vm-101-disk-1', 8 * GiB);
  f.vmOf(101).config.set('scsi1', 'local-lvm:vm-101-disk-1,size=8G');
  const before = snapshot();
  for (const d of [
    'vm-101-disk-0',
    'vm-131-disk-0',
    'vm-101-disk-1',
    'vm-131-disk-1',
    'vm-131-disk-2',
    'vm-111-disk-1',
  ])
    t.equal(await kindOf(c.controllerExpandVolume(expandReq(H + d, 64 * GiB), callCtx())), 'FailedPrecondition', d);
  t.equal(snapshot(), before, 'no disk grown, no VM config changed');
  t.equal(f.count('resizeDisk') + f.count('updateVmConfig') + f.count('unlinkDisks'), 0, 'no mutating call sent');
});

t.test('ControllerModifyVolume on a foreign disk refuses before it creates anything', async (t) => {
  const { f, c, vols, snapshot } = cluster();
  vols.set('vm-101-disk-1', 8 * GiB);
  // VM 101's disk attached by hand to VM 111 (a drive line the driver did not write).
  f.vmOf(111).config.set('scsi3', 'local-lvm:vm-101-disk-1,size=8G');
  const before = snapshot();
  const modify = (d: string) =>
    kindOf(
      c.controllerModifyVolume(
        { volumeId: H + d, mutableParameters: { backup: 'false', diskIOPS: '500' }, secrets: {} },
        callCtx(),
      ),
    );
  t.equal(await modify('vm-101-disk-0'), 'FailedPrecondition', "VM 101's boot disk");
  t.equal(await modify('vm-101-disk-1'), 'FailedPrecondition', "VM 101's disk on VM 111");
  t.equal(snapshot(), before, 'no marker volume, no drive line rewritten');
  t.equal(f.count('allocDisk'), 0, 'no allocation at all');
});

t.test("ControllerPublishVolume attaches neither another VM's unused disk nor an orphan", async (t) => {
  const { f, c, vols, snapshot } = cluster();
  f.vmOf(131).config.set('unused0', 'local-lvm:vm-131-disk-2');
  vols.set('vm-131-disk-2', 8 * GiB);
  vols.set('vm-5555-disk-0', 8 * GiB);
  const before = snapshot();
  for (const d of ['vm-131-disk-2', 'vm-5555-disk-0'])
    t.equal(
      await kindOf(c.controllerPublishVolume(publishReq(H + d, 'talos-worker-1'), callCtx())),
      'FailedPrecondition',
      d,
    );
  t.equal(snapshot(), before, "VM 111's config is unchanged");
});

// Found by the property-based search (ownership.pbt.test.ts, seed 3): a slot whose current value
// is the driver's disk and whose pending value is another disk set by hand. Unlinking the key
// would drop that pending value too: the whole key must be the driver's.
t.test("unpublish leaves a slot alone whose pending value is another disk's", async (t) => {
  const { f, c, vols, snapshot } = cluster();
  vols.set('vm-9999-pvc-x', GiB);
  vols.set('vm-101-disk-1', GiB);
  f.vmOf(111).config.set('scsi1', 'local-lvm:vm-9999-pvc-x,size=1G');
  f.vmOf(111).pending.set('scsi1', 'local-lvm:vm-101-disk-1,size=1G,wwn=0x5000c50012345678');
  const before = snapshot();
  t.equal(
    await kindOf(c.controllerUnpublishVolume(unpublishReq(H + 'vm-9999-pvc-x', ''), callCtx())),
    'FailedPrecondition',
    'refused',
  );
  t.equal(snapshot(), before, "VM 111's pending change is still there");
});
