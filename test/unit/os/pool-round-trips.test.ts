// How many thread-pool requests the node adapters make for what the kernel answers from memory
// (the mount table in procfs, sysfs attributes, device links in /dev). Each fs request is a
// round trip: a pool thread is woken, then the event loop; on a busy node each wake-up waits for
// a CPU, and a node call used to make 14–29 of them in a row (bench/node.ts, docs/performance.md).
// Counted with async_hooks: every libuv fs request starts an FSREQCALLBACK or FSREQPROMISE.
import t from 'tap';
import { AsyncResource, createHook, executionAsyncId } from 'node:async_hooks';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createLinuxBlockDevices, majMinFromRdev } from '../../../src/os/blockdevices.js';
import { createLinuxMounter } from '../../../src/os/mounter.js';
import { listOrEmpty, readIfPresent, readOrEmpty } from '../../../src/os/sysfs.js';
import { PROXMOX_DISKS } from '../../../src/proxmox/node/deps.js';
import { FakeSystem } from './fakes.js';

/**
 * The fs requests `fn` starts: only those descending from its own async scope, so requests of
 * anything else in this process (the test runner writing its results) are not counted.
 */
async function poolRequests(fn: () => Promise<unknown>): Promise<number> {
  const scope = new AsyncResource('POOL_COUNT');
  const ours = new Set([scope.asyncId()]);
  let n = 0;
  const hook = createHook({
    init(id, type, trigger) {
      if (!ours.has(trigger) && !ours.has(executionAsyncId())) return;
      ours.add(id);
      if (type.startsWith('FSREQ')) n++;
    },
  });
  hook.enable();
  try {
    await scope.runInAsyncScope(fn);
  } finally {
    hook.disable();
    scope.emitDestroy();
  }
  return n;
}

function tmp(t: { teardown(fn: () => void): void }): string {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'pool-test-')));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test('the counter sees a pool request (it can fail)', async (t) => {
  t.equal(await poolRequests(() => fs.promises.stat('/')), 1);
  const readFile = await poolRequests(() => fs.promises.readFile('/proc/self/mountinfo', 'utf8'));
  t.ok(readFile >= 4, `fs.promises.readFile of the mount table: open, fstat, reads, close (${readFile})`);
});

t.test('the real mount table is read without the pool', async (t) => {
  const m = createLinuxMounter({ exec: new FakeSystem() });
  t.equal(await poolRequests(() => m.list()), 0);
});

t.test('unmounting a path that is not mounted: one realpath of its parent, nothing else', async (t) => {
  const dir = tmp(t);
  const m = createLinuxMounter({ exec: new FakeSystem() });
  // Before: the parent resolved twice more (once per look at the table) and five requests per look.
  t.equal(await poolRequests(() => m.unmount(path.join(dir, 'target'))), 1);
});

t.test('sysfs attributes and directories are read without the pool, with the same answers', async (t) => {
  const dir = tmp(t);
  fs.writeFileSync(path.join(dir, 'vendor'), 'QEMU    \n');
  fs.mkdirSync(path.join(dir, 'holders', 'dm-0'), { recursive: true });
  let got: unknown[] = [];
  const n = await poolRequests(async () => {
    got = [
      await readOrEmpty(path.join(dir, 'vendor')),
      await readOrEmpty(path.join(dir, 'gone')),
      await readIfPresent(path.join(dir, 'gone', 'deeper')),
      await listOrEmpty(path.join(dir, 'holders')),
      await listOrEmpty(path.join(dir, 'none')),
    ];
  });
  t.equal(n, 0);
  t.same(got, ['QEMU', '', undefined, ['dm-0'], []]);
  // A read that fails for another reason is still an error (a rejection, as before).
  await t.rejects(readOrEmpty(path.join(dir, 'holders')), { code: 'EISDIR' });
});

t.test('isDriverDisk and blockDeviceExists on a fake sysfs and device dir: no pool request', async (t) => {
  const root = tmp(t);
  const devDir = path.join(root, 'by-id');
  fs.mkdirSync(devDir);
  // The link points at a real block device node, as in scsi.test.ts (only stat'ed, never opened).
  const node = '/dev/loop0';
  const majMin = majMinFromRdev(fs.statSync(node, { bigint: true }).rdev);
  fs.symlinkSync(node, path.join(devDir, 'wwn-0x5056432d49443031'));
  const dev = path.join(root, 'dev', 'block', majMin, 'device');
  fs.mkdirSync(dev, { recursive: true });
  fs.writeFileSync(path.join(dev, 'vendor'), 'Linux   \n');
  const bd = createLinuxBlockDevices({
    exec: new FakeSystem(),
    driverDisks: PROXMOX_DISKS,
    sysfsRoot: root,
    deviceDir: devDir,
  });
  let answers: boolean[] = [];
  const n = await poolRequests(async () => {
    answers = [await bd.isDriverDisk(majMin), await bd.blockDeviceExists(majMin), await bd.blockDeviceExists('1:999')];
  });
  t.equal(n, 0);
  t.same(answers, [true, true, false], 'found by its wwn- link; the sysfs entry decides existence');
});
