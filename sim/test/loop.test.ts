// The loop backend on the real host: loop devices over sparse files and wwn-0x… links per VM.
// Needs root and losetup; skipped otherwise.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startTestSim, wwnForSlot } from './fixtures/helpers.js';

function canLoop(): boolean {
  if (process.getuid?.() !== 0) return false;
  try {
    execFileSync('losetup', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const loopsFor = (file: string) => execFileSync('losetup', ['--associated', file], { encoding: 'utf8' }).trim();
const sizeOf = (dev: string) => Number(execFileSync('blockdev', ['--getsize64', dev], { encoding: 'utf8' }).trim());

t.test('loop backend', { skip: canLoop() ? false : 'needs root and losetup' }, async (t) => {
  const base = mkdtempSync(join(tmpdir(), 'loop-test-'));
  t.teardown(() => rmSync(base, { recursive: true, force: true }));
  const stateDir = join(base, 'state');
  const linkDir = join(base, 'by-id');
  const ts = await startTestSim({ backend: 'loop', stateDir, loopLinkDir: linkDir });
  let closed = false;
  t.teardown(async () => {
    if (!closed) await ts.close();
  });
  const { call, admin } = ts;
  const alloc = async (name: string) =>
    (await call('POST', '/nodes/hyper1/storage/local-lvm/content', { vmid: 9999, filename: name, size: '64M' })).body
      ?.data as string;
  const a = await alloc('vm-9999-pvc-la');
  const b = await alloc('vm-9999-pvc-lb');
  const fileA = join(stateDir, 'images', 'hyper1', 'local-lvm', 'vm-9999-pvc-la.raw');
  const fileB = join(stateDir, 'images', 'hyper1', 'local-lvm', 'vm-9999-pvc-lb.raw');
  t.equal(loopsFor(fileA), '', 'allocated but not attached: no loop device');

  t.equal((await call('PUT', '/nodes/hyper1/qemu/101/config', { scsi1: `${a},wwn=${wwnForSlot(1)}` })).status, 200);
  t.equal((await call('PUT', '/nodes/hyper1/qemu/111/config', { scsi1: `${b},wwn=${wwnForSlot(1)}` })).status, 200);
  const linkA = join(linkDir, 'talos-cp-1', 'wwn-0x5056432d49443031');
  const linkB = join(linkDir, 'talos-worker-1', 'wwn-0x5056432d49443031');
  const devA = readlinkSync(linkA);
  const devB = readlinkSync(linkB);
  t.match(devA, /^\/dev\/loop\d+$/);
  t.not(devA, devB, 'same slot on two VMs: two devices, one directory per VM');
  t.match(loopsFor(fileA), devA);
  t.equal(sizeOf(devA), 64 * 1024 ** 2);

  const before = ((await call('GET', '/nodes/hyper1/storage/local-lvm/status')).body?.data as { used: number }).used;
  execFileSync('dd', ['if=/dev/urandom', `of=${devA}`, 'bs=1M', 'count=8', 'oflag=direct', 'status=none']);
  const after = ((await call('GET', '/nodes/hyper1/storage/local-lvm/status')).body?.data as { used: number }).used;
  t.ok(after - before >= 8 * 1024 ** 2, 'writes through the device show up as thin pool usage');

  const up = await call('PUT', '/nodes/hyper1/qemu/101/resize', { disk: 'scsi1', size: '+64M' });
  t.equal((await ts.waitTask('hyper1', up.body?.data as string)).exitstatus, 'OK');
  t.equal(sizeOf(devA), 128 * 1024 ** 2, 'losetup -c made the device see the new size');

  await admin.patchVm(101, { status: 'stopped' });
  t.notOk(existsSync(linkA), 'a stopped VM has no devices');
  t.equal(loopsFor(fileA), '');
  await admin.patchVm(101, { status: 'running' });
  const devA2 = readlinkSync(linkA);
  t.equal(sizeOf(devA2), 128 * 1024 ** 2, 'started again: plugged again');

  t.equal((await call('PUT', '/nodes/hyper1/qemu/101/unlink', { idlist: 'scsi1' })).status, 200);
  t.notOk(existsSync(linkA), 'detach removes the link');
  t.notOk(existsSync(join(linkDir, 'talos-cp-1')), 'and the empty per-VM directory');
  t.equal(loopsFor(fileA), '', 'and the loop device');

  await ts.close();
  closed = true;
  t.equal(loopsFor(fileB), '', 'close() detaches what is still attached');
  t.notOk(existsSync(fileB), 'and removes the sparse files');
  t.notOk(existsSync(linkDir), 'and the link directory it created');
  t.notOk(existsSync(stateDir), 'and the state directory it created');
});

t.test('LoopHotplug command sequence with a fake losetup (runs anywhere)', async (t) => {
  const { LoopHotplug } = await import('../backend/loop.js');
  const base = mkdtempSync(join(tmpdir(), 'loop-fake-'));
  t.teardown(() => rmSync(base, { recursive: true, force: true }));
  const calls: string[] = [];
  let n = 7;
  const exec = async (cmd: string, args: string[]) => {
    calls.push([cmd, ...args].join(' '));
    return args[0] === '--find' ? `/dev/loop${n++}\n` : '';
  };
  const hp = new LoopHotplug(exec, base);
  const vm = { vmid: 101, name: 'talos-cp-1', node: 'hyper1' };
  await hp.plug(vm, { slot: 'scsi1', bus: 'scsi', index: 1, filePath: '/f/a.raw', wwn: '0x5056432D49443031' });
  await hp.plug(vm, { slot: 'scsi1', bus: 'scsi', index: 1, filePath: '/f/a.raw', wwn: '0x5056432D49443031' });
  t.equal(
    readlinkSync(join(base, 'talos-cp-1', 'wwn-0x5056432d49443031')),
    '/dev/loop7',
    'link name in lower case, as udev makes it',
  );
  await hp.resize(vm, 'scsi1');
  await hp.plug(vm, { slot: 'scsi2', bus: 'scsi', index: 2, filePath: '/f/b.raw' });
  await hp.unplug(vm, 'scsi1');
  t.notOk(existsSync(join(base, 'talos-cp-1', 'wwn-0x5056432d49443031')));
  await hp.close();
  t.same(
    calls,
    [
      'losetup --find --show /f/a.raw',
      'losetup --set-capacity /dev/loop7',
      'losetup --find --show /f/b.raw',
      'losetup --detach /dev/loop7',
      'losetup --detach /dev/loop8',
    ],
    'plugging twice is idempotent; close() detaches the rest',
  );
  t.notOk(existsSync(join(base, 'talos-cp-1')), 'empty per-VM directory removed');
});
