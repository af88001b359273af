// The storage kinds (src/proxmox/storage): which format each plugin type takes, the volume names
// a new volume gets on each, upstream's handles of file and shared storages.
import t from 'tap';
import { allocFilename, formatOfVolname, volnameFor } from '../../../../src/proxmox/storage/kind.js';
import { isSharedStorage, kindForCreate, kindOf } from '../../../../src/proxmox/storage/kinds.js';
import { diskOwner, formatVolumeId, parseVolumeId } from '../../../../src/proxmox/volume-id.js';
import { classify, permitCreate } from '../../../../src/proxmox/controller/safety/ownership.js';
import { present } from '../../../helpers/present.js';

t.test('storageFormat per plugin type: qcow2 on file storages only, a clear refusal elsewhere', async (t) => {
  for (const type of ['lvmthin', 'lvm', 'zfspool', 'rbd', 'dir', 'nfs', 'cifs']) {
    t.equal(kindForCreate('s', type, undefined).format, 'raw', `${type} defaults to raw`);
    t.equal(kindForCreate('s', type, 'raw').format, 'raw', `${type} takes raw`);
  }
  for (const type of ['dir', 'nfs', 'cifs']) t.equal(kindForCreate('s', type, 'qcow2').format, 'qcow2');
  t.throws(() => kindForCreate('local-lvm', 'lvmthin', 'qcow2'), {
    kind: 'InvalidArgument',
    message:
      /"storageFormat": "qcow2" cannot be used on storage "local-lvm" \(lvmthin\): LVM-thin holds raw volumes only \(use raw/,
  });
  t.throws(() => kindForCreate('local-zfs', 'zfspool', 'qcow2'), {
    kind: 'InvalidArgument',
    message: /zvols, raw only/,
  });
  t.throws(() => kindForCreate('ceph', 'rbd', 'qcow2'), { kind: 'InvalidArgument', message: /raw images only/ });
  t.throws(() => kindForCreate('san', 'lvm', 'qcow2'), {
    kind: 'InvalidArgument',
    message: /snapshot-as-volume-chain/,
  });
  t.throws(() => kindForCreate('pbs', 'pbs', undefined), {
    kind: 'InvalidArgument',
    message:
      /storage "pbs" is of type pbs, which this driver does not serve \(served: lvmthin, lvm, zfspool, rbd, dir, nfs, cifs\)/,
  });
  t.equal(kindOf(undefined)?.name, 'LVM-thin', 'a row without a plugin type is taken as LVM-thin, as before');
});

t.test('shared: the storage.cfg flag, or the type', async (t) => {
  t.equal(isSharedStorage('lvmthin', false), false);
  t.equal(isSharedStorage('lvm', true), true, 'shared LVM on a SAN');
  t.equal(isSharedStorage('rbd', false), true);
  t.equal(isSharedStorage('nfs', false), true);
  t.equal(isSharedStorage('cifs', false), true);
  t.equal(isSharedStorage('dir', false), false);
  t.equal(isSharedStorage(undefined, false), false);
});

t.test('volume names: block storages keep the disk name, file storages <vmid>/<name>.<fmt>', async (t) => {
  const disk = 'vm-9999-pvc-0b1c';
  t.equal(volnameFor(present(kindOf('zfspool'), 'zfs'), disk, 9999, 'raw'), disk);
  t.equal(volnameFor(present(kindOf('rbd'), 'rbd'), disk, 9999, 'raw'), disk);
  const file = volnameFor(present(kindOf('nfs'), 'nfs'), disk, 9999, 'qcow2');
  t.equal(file, '9999/vm-9999-pvc-0b1c.qcow2', 'as upstream names it (volume.NewVolume with a format)');
  t.equal(allocFilename(file), 'vm-9999-pvc-0b1c.qcow2', 'the allocation takes the bare file name');
  t.equal(formatOfVolname(file), 'qcow2');
  t.equal(formatOfVolname(disk), 'raw');
  t.equal(diskOwner(file), 9999);
  t.equal(classify(file, 9999), 'driver');
  t.equal(classify('9999/vm-9999-disk-0.qcow2', 9999), 'proxmox', "Proxmox's own name on a file storage");
  const permit = permitCreate({ storage: 'nas', disk: file, controllerVmId: 9999 }, 'hyper1', 1024, 'pvc-0b1c');
  t.match(permit, {
    allowed: true,
    value: { body: { req: { vmid: 9999, filename: 'vm-9999-pvc-0b1c.qcow2', format: 'qcow2' } } },
  });
});

t.test("upstream's handles: five segments on a file storage, an empty zone on a shared one", async (t) => {
  const id = 'homelab/hyper1/local/9999/vm-9999-pvc-0b1c.raw';
  const ref = parseVolumeId(id);
  t.same(ref, { region: 'homelab', zone: 'hyper1', storage: 'local', disk: '9999/vm-9999-pvc-0b1c.raw' });
  t.equal(formatVolumeId(present(ref, 'ref')), id, 'round trip');
  t.same(parseVolumeId('homelab//nas/9999/vm-9999-pvc-x.qcow2'), {
    region: 'homelab',
    zone: '',
    storage: 'nas',
    disk: '9999/vm-9999-pvc-x.qcow2',
  });
  for (const bad of [
    'homelab/hyper1/local/1234/vm-9999-pvc-x.raw', // the directory is not the owner's
    'homelab/hyper1/local/9999/vm-9999-pvc-x', // a file storage's name has its format
    'homelab/hyper1/local/9999/vm-9999-pvc-x.vmdk',
    'homelab/hyper1/local/a/9999/vm-9999-pvc-x.raw',
  ])
    t.equal(parseVolumeId(bad), undefined, `rejects ${bad}`);
});
