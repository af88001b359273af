import t from 'tap';
import { normalizeDrive, parseDrive, volumeOwner } from '../../model/drive.js';
import {
  formatDiskSize,
  parseAllocSizeKiB,
  parseDiskSize,
  parseResizeSize,
  roundUpToExtent,
} from '../../model/sizes.js';
import { configDigest, configText, configView, pendingView, registerUnused } from '../../model/vmconfig.js';
import type { VmModel } from '../../model/types.js';
import { KeyedLocks } from '../../locks.js';
import { encodeUpid, UPID_RE, statusIsError } from '../../tasks.js';

t.test('sizes parse and print like PVE', async (t) => {
  t.equal(parseDiskSize('10G'), 10 * 1024 ** 3);
  t.equal(parseDiskSize('1.5K'), 1536);
  t.equal(parseDiskSize('4096'), 4096);
  t.equal(parseDiskSize('10Gi'), undefined);
  t.equal(formatDiskSize(10 * 1024 ** 3), '10G');
  t.equal(formatDiskSize(512 * 1024 ** 2), '512M');
  t.equal(formatDiskSize(1536), '1536');
  t.equal(formatDiskSize(3 * 1024), '3K');
  t.equal(formatDiskSize(1024 ** 4), '1T');
  t.equal(parseAllocSizeKiB('10G'), 10 * 1024 * 1024);
  t.equal(parseAllocSizeKiB('512M'), 512 * 1024);
  t.equal(parseAllocSizeKiB('2048'), 2048);
  t.equal(parseAllocSizeKiB('1T'), undefined);
  t.equal(parseResizeSize('+1G', 1024 ** 3), 2 * 1024 ** 3);
  t.equal(parseResizeSize('5G', 1024 ** 3), 5 * 1024 ** 3);
  t.equal(roundUpToExtent(1), 4 * 1024 ** 2);
  t.equal(roundUpToExtent(8 * 1024 ** 2), 8 * 1024 ** 2);
});

t.test('drive strings are normalised: file first, keys sorted, booleans 0/1, size in largest unit', async (t) => {
  t.equal(
    normalizeDrive(
      'scsi1',
      'local-lvm:vm-9999-pvc-a,wwn=0x5056432d49443031,ssd=true,backup=no,iothread=on,size=10737418240,cache=writethrough',
    ),
    'local-lvm:vm-9999-pvc-a,backup=0,cache=writethrough,iothread=1,size=10G,ssd=1,wwn=0x5056432d49443031',
  );
  t.equal(normalizeDrive('scsi2', 'file=local-lvm:vm-1-x,discard=on'), 'local-lvm:vm-1-x,discard=on');
  t.throws(() => parseDrive('scsi1', 'local-lvm:x,bogus=1'), /scsi1\.bogus: property is not defined in schema/);
  t.throws(() => parseDrive('scsi1', 'local-lvm:x,cache=fast'), /does not have a value in the enumeration/);
  t.throws(() => parseDrive('scsi1', 'local-lvm:x,wwn=0x12'), /regex pattern/);
  t.throws(() => parseDrive('scsi1', 'local-lvm:x,ssd=maybe'), /type check \('boolean'\) failed/);
  t.throws(() => parseDrive('scsi1', 'backup=1'), /file: property is missing/);
  t.equal(volumeOwner('vm-9999-pvc-0b1c'), 9999);
  t.equal(volumeOwner('foo'), undefined);
});

function vm(): VmModel {
  return {
    vmid: 101,
    node: 'hyper1',
    status: 'running',
    startedAt: 0,
    pid: 1,
    config: new Map([
      ['name', 'talos-cp-1'],
      ['scsi0', 'local-lvm:vm-101-disk-0,size=32G'],
      ['cores', '2'],
    ]),
    pending: new Map(),
    pendingDelete: new Map(),
    snapshots: new Map(),
  };
}

t.test('config file text, digest, views and unused registration', async (t) => {
  const v = vm();
  const d1 = configDigest(v);
  t.match(d1, /^[0-9a-f]{40}$/);
  v.pending.set('scsi1', 'local-lvm:vm-9999-pvc-a,size=1G');
  v.pendingDelete.set('scsi0', true);
  t.match(configText(v), /\[PENDING\]\ndelete: !scsi0\nscsi1: local-lvm:vm-9999-pvc-a,size=1G\n/);
  t.not(configDigest(v), d1, 'pending changes change the digest');
  const merged = configView(v, false);
  t.equal(merged.scsi1, 'local-lvm:vm-9999-pvc-a,size=1G');
  t.notOk('scsi0' in merged, 'pending delete hidden in the merged view');
  t.equal(merged.cores, 2, 'integer options are numbers');
  const current = configView(v, true);
  t.ok('scsi0' in current);
  t.notOk('scsi1' in current);
  const pend = pendingView(v);
  t.same(
    pend.find((i) => i.key === 'scsi0'),
    { key: 'scsi0', value: 'local-lvm:vm-101-disk-0,size=32G', delete: 2 },
  );
  t.same(
    pend.find((i) => i.key === 'scsi1'),
    { key: 'scsi1', pending: 'local-lvm:vm-9999-pvc-a,size=1G' },
  );
  t.ok(pend.find((i) => i.key === 'digest'));
  registerUnused(v, 'local-lvm:vm-9999-pvc-a');
  t.notOk(
    [...v.config.keys()].some((k) => k.startsWith('unused')),
    'a foreign volume leaves no unusedN',
  );
  registerUnused(v, 'local-lvm:vm-101-disk-7');
  registerUnused(v, 'local-lvm:vm-101-disk-7');
  t.equal(v.config.get('unused0'), 'local-lvm:vm-101-disk-7');
  t.notOk(v.config.has('unused1'), 'registered once');
});

t.test('keyed locks: one holder, FIFO waiters, timeout message', async (t) => {
  // The lock wait is simulated time and unref'd (sim/locks.ts): with no server in this process,
  // only this keeps it alive until the 20 ms timeout fires.
  const keepAlive = setInterval(() => undefined, 1000);
  t.teardown(() => clearInterval(keepAlive));
  const locks = new KeyedLocks();
  const order: number[] = [];
  const release = await locks.acquire('a', '/var/lock/x', 100);
  const second = locks.acquire('a', '/var/lock/x', 1000).then((r) => {
    order.push(2);
    r();
  });
  await t.rejects(locks.acquire('a', '/var/lock/x', 20), { message: "can't lock file '/var/lock/x' - got timeout" });
  order.push(1);
  release();
  await second;
  t.same(order, [1, 2]);
  t.notOk(locks.isHeld('a'));
  const r2 = await locks.acquire('b', 'f', 10);
  const pending = locks.acquire('b', 'f', 10_000);
  locks.abortAll();
  await t.rejects(pending, /aborted/);
  r2();
});

t.test('UPID encoding matches PVE::Tools::upid_encode', async (t) => {
  const upid = encodeUpid({
    node: 'hyper1',
    pid: 0x1234,
    pstart: 0xabc,
    starttime: 0x65000000,
    type: 'qmconfig',
    id: '101',
    user: 'kubernetes-csi@pve!csi',
  });
  t.equal(upid, 'UPID:hyper1:00001234:00000ABC:65000000:qmconfig:101:kubernetes-csi@pve!csi:');
  t.match(upid, UPID_RE);
  t.notOk(statusIsError('OK'));
  t.notOk(statusIsError('WARNINGS: 2'));
  t.ok(statusIsError('shrinking disks is not supported'));
});
