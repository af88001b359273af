// Volume handles, disk names, parameters, WWNs and sizes: the upstream contracts.
import t from 'tap';
import { isCsiError } from '../../../src/errors.js';
import {
  diskNameFor,
  diskOwner,
  formatVolumeId,
  MAX_DISK_NAME,
  parseVolid,
  parseVolumeId,
} from '../../../src/proxmox/volume-id.js';
import {
  DEFAULT_SIZE,
  GiB,
  MiB,
  driveOptionsFromContext,
  driveString,
  parseCreateParameters,
  sizeFits,
  sizeForCreate,
  sizeForExpand,
  volumeContextOf,
} from '../../../src/proxmox/controller/params/params.js';
import { publishContextForSlot, wwnForSlot } from '../../../src/proxmox/contract.js';
import { present } from '../../helpers/present.js';

const kind = (fn: () => unknown): string => {
  try {
    fn();
    return 'ok';
  } catch (e) {
    return isCsiError(e) ? e.kind : `untyped: ${(e as Error).message}`;
  }
};

t.test('volume handle codec', async (t) => {
  const id = 'homelab/hyper1/local-lvm/vm-9999-pvc-0b1c2d3e-1111-2222-3333-444455556666';
  const ref = parseVolumeId(id);
  t.same(ref, {
    region: 'homelab',
    zone: 'hyper1',
    storage: 'local-lvm',
    disk: 'vm-9999-pvc-0b1c2d3e-1111-2222-3333-444455556666',
  });
  t.equal(formatVolumeId(present(ref, 'the parsed volume id')), id, 'round trip');
  t.same(
    parseVolumeId('homelab//ceph-rbd/vm-9999-pvc-x'),
    { region: 'homelab', zone: '', storage: 'ceph-rbd', disk: 'vm-9999-pvc-x' },
    'empty zone (shared storage) parses',
  );
  for (const bad of [
    '',
    'fake-vol-id-1234',
    'a/b/c',
    'a/b/c/d/e',
    'homelab/hyper1/local-lvm/disk-1',
    'homelab/hyper1/local-lvm/vm-x-1',
    'homelab/hyper 1/local-lvm/vm-1-a',
    'homelab/hyper1/9bad/vm-1-a',
    '/hyper1/local-lvm/vm-1-a',
    'homelab/hyper1/local-lvm/vm-1-a b',
  ]) {
    t.equal(parseVolumeId(bad), undefined, `rejects ${JSON.stringify(bad)}`);
  }
  t.equal(diskOwner('vm-9999-pvc-x'), 9999);
  t.equal(diskOwner('base-1-x'), undefined);
  t.same(parseVolid('local-lvm:vm-9999-pvc-x'), { storage: 'local-lvm', disk: 'vm-9999-pvc-x' });
  t.equal(parseVolid('nocolon'), undefined);
});

t.test('disk names', async (t) => {
  t.equal(
    diskNameFor(9999, 'pvc-0b1c2d3e-1111-2222-3333-444455556666'),
    'vm-9999-pvc-0b1c2d3e-1111-2222-3333-444455556666',
    'upstream name for Kubernetes PV names',
  );
  t.equal(diskNameFor(1234, 'pvc-a'), 'vm-1234-pvc-a', 'controllerVmID is honoured');
  const long = 'x'.repeat(128);
  const a = diskNameFor(9999, long);
  t.ok(a.length <= MAX_DISK_NAME, 'long names are bounded');
  t.match(a, /^vm-9999-x+-[0-9a-f]{16}$/);
  t.equal(diskNameFor(9999, long), a, 'deterministic');
  t.not(diskNameFor(9999, long + 'y'), a, 'distinct names stay distinct');
  const odd = diskNameFor(9999, 'my volume/ü');
  t.match(odd, /^vm-9999-[A-Za-z0-9+_.-]+$/, 'characters LVM refuses are replaced');
  t.ok(parseVolumeId(`homelab/hyper1/local-lvm/${odd}`), 'hashed names still make valid handles');
});

t.test('StorageClass parameters', async (t) => {
  const seed = {
    storage: 'local-lvm',
    cache: 'writethrough',
    ssd: 'true',
    backup: 'true',
    'csi.storage.k8s.io/fstype': 'ext4',
  };
  t.same(
    parseCreateParameters(seed),
    {
      storage: 'local-lvm',
      cache: 'writethrough',
      ssd: true,
      backup: true,
      iothread: true,
      diskIOPS: undefined,
      diskMBps: undefined,
      blockSize: undefined,
      inodeSize: undefined,
      fsType: 'ext4',
    },
    'the seed StorageClass proxmox-local',
  );
  t.equal(
    kind(() => parseCreateParameters({})),
    'InvalidArgument',
    'storage is required',
  );
  t.throws(
    () => parseCreateParameters({ storage: 'local-lvm', bogus: '1' }),
    /parameter "bogus" is not known/,
    'unknown key named',
  );
  t.throws(() => parseCreateParameters({ storage: 'local-lvm', ssd: 'yes' }), /parameter "ssd"/);
  t.throws(() => parseCreateParameters({ storage: 'local-lvm', cache: 'fast' }), /parameter "cache"/);
  t.throws(() => parseCreateParameters({ storage: 'local-lvm', diskIOPS: '-1' }), /parameter "diskIOPS"/);
  t.throws(() => parseCreateParameters({ storage: 'local-lvm', blockSize: '3000' }), /parameter "blockSize"/);
  t.throws(() => parseCreateParameters({ storage: 'local-lvm', 'csi.storage.k8s.io/fstype': 'ntfs' }), /fstype/);
  t.throws(() => parseCreateParameters({ storage: 'local-lvm', storageFormat: 'vmdk' }), /storageFormat/);
  const p = parseCreateParameters({
    storage: 'local-lvm',
    backup: '0',
    iothread: 'False',
    diskIOPS: '500',
    diskMBps: '100',
    blockSize: '4096',
    inodeSize: '256',
    'csi.storage.k8s.io/pvc/name': 'data',
    'csi.storage.k8s.io/pvc/namespace': 'default',
    'csi.storage.k8s.io/pv/name': 'pvc-1',
  });
  t.match(p, { backup: false, iothread: false, diskIOPS: 500, diskMBps: 100, blockSize: 4096, inodeSize: 256 });
  t.same(
    volumeContextOf({
      storage: 'local-lvm',
      blockSize: '4096',
      'csi.storage.k8s.io/pvc/name': 'data',
      'csi.storage.k8s.io/fstype': 'xfs',
    }),
    { storage: 'local-lvm', blockSize: '4096', 'csi.storage.k8s.io/fstype': 'xfs' },
    'volume context drops per-claim metadata, keeps what the node reads',
  );
});

t.test('drive options and WWN', async (t) => {
  t.equal(wwnForSlot(1), '0x5056432d49443031', 'slot 1 = hex of "PVC-ID01"');
  t.equal(wwnForSlot(30), '0x' + Buffer.from('PVC-ID30').toString('hex'));
  t.same(publishContextForSlot(7), { DevicePath: '/dev/disk/by-id/wwn-0x5056432d49443037', lun: '7' });
  const seedCtx = {
    storage: 'local-lvm',
    cache: 'writethrough',
    ssd: 'true',
    backup: 'true',
    'storage.kubernetes.io/csiProvisionerIdentity': 'x',
  };
  const o = driveOptionsFromContext(seedCtx, false);
  t.equal(
    driveString('local-lvm', 'vm-9999-pvc-a', o, wwnForSlot(1)),
    'local-lvm:vm-9999-pvc-a,backup=1,cache=writethrough,discard=on,iothread=1,ssd=1,wwn=0x5056432d49443031',
  );
  const limited = driveOptionsFromContext({ diskIOPS: '100', diskMBps: '50' }, true);
  t.equal(
    driveString('local-lvm', 'vm-9999-pvc-b', limited, wwnForSlot(2)),
    'local-lvm:vm-9999-pvc-b,backup=0,iops_rd=100,iops_wr=100,iothread=1,mbps_rd=50,mbps_wr=50,ro=1,wwn=0x5056432d49443032',
    'defaults: backup=0, iothread=1; readonly → ro=1',
  );
  t.equal(
    kind(() => driveOptionsFromContext({ diskIOPS: 'many' }, false)),
    'InvalidArgument',
    'bad value in an old PV is named',
  );
});

t.test('sizes', async (t) => {
  t.equal(sizeForCreate(null), DEFAULT_SIZE, 'default 10 GiB');
  t.equal(sizeForCreate({ requiredBytes: '1', limitBytes: '0' }), 512 * MiB, 'rounded up to 512 MiB');
  t.equal(sizeForCreate({ requiredBytes: String(GiB + 1), limitBytes: '0' }), GiB + 512 * MiB);
  t.equal(sizeForCreate({ requiredBytes: String(10 * GiB), limitBytes: String(10 * GiB) }), 10 * GiB, 'exact fit');
  t.equal(sizeForCreate({ requiredBytes: '0', limitBytes: String(GiB + 7) }), GiB, 'limit only: largest step under it');
  t.equal(
    kind(() => sizeForCreate({ requiredBytes: String(GiB + 1), limitBytes: String(GiB + 2) })),
    'OutOfRange',
    'rounding cannot fit the limit',
  );
  t.equal(
    kind(() => sizeForCreate({ requiredBytes: '0', limitBytes: '1000' })),
    'OutOfRange',
  );
  t.equal(
    kind(() => sizeForCreate({ requiredBytes: String(2 * GiB), limitBytes: String(GiB) })),
    'OutOfRange',
    'limit below required',
  );
  t.equal(
    kind(() => sizeForCreate({ requiredBytes: '99999999999999999999', limitBytes: '0' })),
    'OutOfRange',
  );
  t.ok(sizeFits(10 * GiB, { requiredBytes: String(10 * GiB), limitBytes: String(10 * GiB) }));
  t.notOk(
    sizeFits(10 * GiB, { requiredBytes: String(20 * GiB), limitBytes: String(20 * GiB) }),
    'different capacity does not fit',
  );
  t.equal(sizeForExpand({ requiredBytes: String(11 * GiB), limitBytes: '0' }), 11 * GiB);
  t.equal(
    kind(() => sizeForExpand({ requiredBytes: '0', limitBytes: '0' })),
    'InvalidArgument',
  );
});

t.test('drive strings and where a disk sits in a VM config', async (t) => {
  const { parseDrive, sitesOf, freeSlots, unusedOf, smbiosUuid } =
    await import('../../../src/proxmox/controller/state/drives.js');
  t.same(parseDrive('local-lvm:vm-9999-pvc-a,backup=0,wwn=0x5056432d49443031'), {
    storage: 'local-lvm',
    disk: 'vm-9999-pvc-a',
    options: { backup: '0', wwn: '0x5056432d49443031' },
  });
  t.same(parseDrive('file=local-lvm:vm-9999-pvc-a,ro=1'), {
    storage: 'local-lvm',
    disk: 'vm-9999-pvc-a',
    options: { ro: '1' },
  });
  t.equal(parseDrive('none,media=cdrom'), undefined, 'a drive without a volume');
  const entries = [
    { key: 'scsi0', value: 'local-lvm:vm-101-disk-0,size=32G' },
    { key: 'scsi1', value: 'local-lvm:vm-9999-pvc-a1,wwn=0x1' },
    { key: 'scsi2', pending: 'local-lvm:vm-9999-pvc-a' },
    { key: 'scsi3', value: 'local-lvm:vm-9999-pvc-a', pendingDelete: true },
    { key: 'scsi4', value: 'local-lvm:vm-9999-pvc-a' },
    { key: 'unused0', value: 'local-lvm:vm-9999-pvc-a' },
    { key: 'smbios1', value: 'uuid=6F0A4C1E-2B3D-4E5F-8A9B-0C1D2E3F4A51' },
  ];
  t.same(
    sitesOf(entries, 'local-lvm', 'vm-9999-pvc-a').map((s) => [s.key, s.placement]),
    [
      ['scsi2', 'attaching'],
      ['scsi3', 'detaching'],
      ['scsi4', 'attached'],
    ],
    'exact disk match (pvc-a1 is another disk)',
  );
  t.same(unusedOf(entries, 'local-lvm', 'vm-9999-pvc-a'), ['unused0']);
  t.same(freeSlots(entries).slice(0, 2), [5, 6]);
  t.equal(freeSlots(entries).length, 26);
  t.equal(smbiosUuid(entries), '6f0a4c1e-2b3d-4e5f-8a9b-0c1d2e3f4a51');
});
