// The per-VM attach queue against the fake Proxmox: slot allocation, merging of concurrent
// changes, confirmation by read-back, and the retry paths (lock timeouts, failed tasks, lost
// answers, hot-unplug that stays pending).
import t from 'tap';
import pino from 'pino';
import { isCsiError } from '../../../../../src/errors.js';
import {
  AttachQueues,
  HelperLeftovers,
  type AttachRequest,
} from '../../../../../src/proxmox/controller/attach/attach-queue.js';
import {
  driveOptionsFromContext,
  GiB,
  HELPER_DRIVE_OPTIONS,
} from '../../../../../src/proxmox/controller/params/params.js';
import { helperWwnForSlot, isHelperWwn, wwnForSlot } from '../../../../../src/proxmox/contract.js';
import { VmLocator } from '../../../../../src/proxmox/controller/state/vm-locator.js';
import { OwnershipPort } from '../../../../../src/proxmox/controller/safety/ownership-port.js';
import { present } from '../../../../helpers/present.js';
import { rejection } from '../../../../helpers/rejection.js';
import { seedCluster } from '../../api/fake-api.js';
import { fakeClock } from '../../../../helpers/fake-clock.js';

const WORKER1 = { vmid: 102, node: 'hyper1', name: 'talos-worker-1' };
const CP1 = { vmid: 101, node: 'hyper1', name: 'talos-cp-1' };

function setup(confirmTimeoutMs = 300) {
  const f = seedCluster();
  const locator = new VmLocator(f, { cluster: 'homelab' });
  const q = new AttachQueues({
    api: f,
    port: new OwnershipPort(f),
    cluster: 'homelab',
    locator,
    log: pino({ level: 'silent' }),
    confirmTimeoutMs,
  });
  const vols = f.storageOf('hyper1', 'local-lvm').volumes;
  const disk = (name: string): string => {
    vols.set(`vm-9999-${name}`, GiB);
    return `vm-9999-${name}`;
  };
  const req = (name: string, extra: Partial<AttachRequest> = {}): AttachRequest => ({
    storage: 'local-lvm',
    disk: disk(name),
    diskNode: 'hyper1',
    options: driveOptionsFromContext({}, false),
    exclusive: true,
    ...extra,
  });
  const cfg = (vmid = 102) => f.vmOf(vmid).config;
  return { f, q, req, cfg, locator };
}

async function kindOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (e) {
    return isCsiError(e) ? e.kind : `untyped: ${(e as Error).message}`;
  }
}

t.test('one attach: first free slot, WWN of the slot, confirmed, idempotent', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup();
  const slot = await q.attach(WORKER1, req('pvc-a'));
  t.equal(slot, 1, 'scsi0 is the boot disk; scsi1 is first free');
  t.equal(cfg().get('scsi1'), `local-lvm:vm-9999-pvc-a,backup=0,iothread=1,wwn=${wwnForSlot(1)}`);
  t.equal(f.count('updateVmConfig'), 1);
  t.ok(f.count('vmPending') >= 2, 'read before and after the change');
  f.resetCalls();
  t.equal(await q.attach(WORKER1, req('pvc-a')), 1, 'already attached → same slot');
  t.equal(f.count('updateVmConfig'), 0, 'no change the second time');
});

t.test('slot allocation honours current, pending and pending-delete entries, and cleans leftovers', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup();
  const vm = f.vmOf(102);
  req('other-1');
  req('other-2');
  req('other-3');
  vm.config.set('scsi1', 'local-lvm:vm-9999-other-1,wwn=0x1');
  vm.pending.set('scsi2', 'local-lvm:vm-9999-other-2');
  vm.config.set('scsi3', 'local-lvm:vm-9999-other-3');
  vm.pendingDelete.add('scsi3');
  vm.config.set('unused0', 'local-lvm:vm-9999-pvc-a');
  const slot = await q.attach(WORKER1, req('pvc-a'));
  t.equal(slot, 4, 'scsi1 (in use), scsi2 (pending add), scsi3 (pending delete) are skipped');
  t.notOk(cfg().has('unused0'), 'a leftover unused entry of the disk is removed in the same change');
  t.equal(f.count('updateVmConfig'), 1);
  t.equal(f.slotConflicts, 0);
});

t.test('concurrent attaches to one VM are merged and never race for a slot', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup();
  f.latencyMs = 10;
  const names = Array.from({ length: 24 }, (_, i) => `pvc-${i}`);
  const reqs = names.map((n) => req(n));
  const slots = await Promise.all(reqs.map((r) => q.attach(WORKER1, r)));
  t.same(
    [...slots].sort((a, b) => a - b),
    Array.from({ length: 24 }, (_, i) => i + 1),
    'slots 1..24, each once',
  );
  t.ok(f.count('updateVmConfig') <= 2, `merged into ${f.count('updateVmConfig')} config change(s)`);
  t.equal(f.slotConflicts, 0, 'no slot was set over another disk');
  t.equal(f.maxConcurrentWriters, 1, 'never two writers on the VM config');
  for (const [i, r] of reqs.entries())
    t.match(cfg().get(`scsi${slots[i]}`), `${r.disk},`, `scsi${slots[i]} holds ${r.disk}`);
});

t.test('ResourceExhausted only for what does not fit', async (t) => {
  fakeClock(t);
  const { f, q, req } = setup();
  const vm = f.vmOf(102);
  for (let s = 1; s <= 29; s++) vm.config.set(`scsi${s}`, `local-lvm:vm-9999-fill-${s}`);
  const results = await Promise.all([kindOf(q.attach(WORKER1, req('pvc-x'))), kindOf(q.attach(WORKER1, req('pvc-y')))]);
  t.same(results.sort(), ['ResourceExhausted', 'ok'], 'one gets scsi30, the other is refused');
  t.equal(await kindOf(q.attach(WORKER1, req('pvc-z'))), 'ResourceExhausted');
});

t.test('lock timeouts are retried with backoff', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup();
  f.faults.lockTimeouts = 2;
  t.equal(await q.attach(WORKER1, req('pvc-a')), 1);
  t.equal(f.count('updateVmConfig'), 3, 'two timeouts, then success');
  t.ok(cfg().has('scsi1'));
});

t.test('a task that ends in error is an error', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup();
  f.faults.taskExits.push('hotplug problem - unable to add device');
  const p = q.attach(WORKER1, req('pvc-a'));
  t.equal(await kindOf(p), 'Unavailable');
  t.match((await rejection(p)).message, /task failed: hotplug problem/);
  t.notOk(cfg().has('scsi1'));
  t.equal(f.count('updateVmConfig'), 1, 'not blindly repeated');
  t.equal(await q.attach(WORKER1, req('pvc-a')), 1, 'the CO retry succeeds');
  f.faults.taskExits.push("can't lock file '/var/lock/qemu-server/lock-102.conf' - got timeout");
  t.equal(await q.attach(WORKER1, req('pvc-b')), 2, 'a task failing on the lock is retried');
});

t.test('one bad disk in a merged change does not fail the others', async (t) => {
  fakeClock(t);
  const { f, q, req } = setup();
  const good = [req('pvc-a'), req('pvc-b')];
  const bad = req('pvc-gone');
  f.storageOf('hyper1', 'local-lvm').volumes.delete(bad.disk);
  const res = await Promise.all([...good, bad].map((r) => kindOf(q.attach(WORKER1, { ...r, exclusive: false }))));
  t.same(res, ['ok', 'ok', 'NotFound'], 'the missing disk is refused by the existence check');
  t.equal(f.slotConflicts, 0);
});

t.test('lost answers: read back instead of repeating', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup();
  f.faults.dropAfter.set('updateVmConfig', 1);
  t.equal(await q.attach(WORKER1, req('pvc-a')), 1, 'the change happened though its answer was lost');
  t.equal(f.count('updateVmConfig'), 1, 'and it was not sent again');
  f.faults.dropBefore.set('updateVmConfig', 1);
  t.equal(await q.attach(WORKER1, req('pvc-b')), 2, 'a change that never arrived is sent again after reading state');
  t.equal(f.count('updateVmConfig'), 3);
  f.faults.dropAfter.set('unlinkDisks', 1);
  await q.detach(WORKER1, { storage: 'local-lvm', disk: 'vm-9999-pvc-a' });
  t.notOk(cfg().has('scsi1'), 'detach confirmed by reading back');
  t.equal(f.count('unlinkDisks'), 1);
  t.equal(f.slotConflicts, 0);
});

t.test('single-node volumes are not attached to a second VM', async (t) => {
  fakeClock(t);
  const { f, q, req } = setup();
  await q.attach(CP1, req('pvc-a'));
  const p = q.attach(WORKER1, req('pvc-a'));
  t.equal(await kindOf(p), 'FailedPrecondition');
  t.match((await rejection(p)).message, /scsi1 of VM talos-cp-1 \(101\)/, 'names the VM that has it');
  t.notOk(f.vmOf(102).config.has('scsi1'));
  t.equal(await q.attach(WORKER1, req('pvc-a', { exclusive: false })), 1, 'multi-node modes may');
});

t.test('readonly mismatch on the same VM is AlreadyExists', async (t) => {
  fakeClock(t);
  const { q, req } = setup();
  await q.attach(WORKER1, req('pvc-a'));
  t.equal(
    await kindOf(q.attach(WORKER1, req('pvc-a', { options: driveOptionsFromContext({}, true) }))),
    'AlreadyExists',
  );
});

t.test('detach: merged, idempotent, VM gone is success', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup();
  const reqs = Array.from({ length: 10 }, (_, i) => req(`pvc-${i}`));
  await Promise.all(reqs.map((r) => q.attach(WORKER1, r)));
  f.resetCalls();
  f.latencyMs = 10;
  await Promise.all(reqs.map((r) => q.detach(WORKER1, r)));
  t.ok(f.count('unlinkDisks') <= 2, `merged into ${f.count('unlinkDisks')} unlink call(s)`);
  t.same(
    [...cfg().keys()].filter((k) => /^scsi[1-9]/.test(k)),
    [],
    'all gone',
  );
  f.resetCalls();
  const first = present(reqs[0], 'the first request');
  await q.detach(WORKER1, first);
  t.equal(f.count('unlinkDisks'), 0, 'nothing to do the second time');
  await q.detach({ vmid: 999, node: 'hyper1', name: 'gone' }, first);
  t.pass('a VM that no longer exists has nothing attached');
});

t.test('detach that stays pending: retried, reported, then cleaned up', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup(100);
  const r = req('pvc-a');
  await q.attach(WORKER1, r);
  f.faults.stuckDetach.add(102);
  const p = q.detach(WORKER1, r);
  t.equal(await kindOf(p), 'Unavailable');
  t.match((await rejection(p)).message, /pending delete/);
  t.ok(f.count('unlinkDisks') > 1, 'the unlink was re-issued to re-trigger the hot-unplug');
  t.ok(f.vmOf(102).pendingDelete.has('scsi1'), 'still pending (the seed known gap)');
  f.faults.stuckDetach.delete(102);
  await q.detach(WORKER1, r);
  t.notOk(cfg().has('scsi1'), 'the next unpublish completes it');
  t.equal(f.vmOf(102).pendingDelete.size, 0, 'no pending delete left to break backups');
});

t.test('detach removes leftover unused and pending entries of the disk only', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup();
  const vm = f.vmOf(102);
  const r = req('pvc-a');
  req('pvc-b');
  vm.config.set('unused0', 'local-lvm:vm-9999-pvc-a');
  vm.config.set('unused1', 'local-lvm:vm-9999-pvc-b');
  vm.pending.set('scsi5', 'local-lvm:vm-9999-pvc-a,wwn=0x5056432d49443035');
  await q.detach(WORKER1, r);
  t.notOk(cfg().has('unused0'), 'leftover of this disk removed');
  t.ok(cfg().has('unused1'), 'other leftovers untouched');
  t.notOk(vm.pending.has('scsi5'), 'a pending attach of the disk is dropped');
});

t.test('never drops an unused entry the VM owns (that would free the disk)', async (t) => {
  fakeClock(t);
  const { f, q, cfg } = setup();
  f.vmOf(102).config.set('unused0', 'local-lvm:vm-102-disk-1');
  const refused = await q.detach(WORKER1, { storage: 'local-lvm', disk: 'vm-102-disk-1' }).then(
    () => 'ok',
    (e: unknown) => (e as { kind?: string }).kind,
  );
  t.equal(refused, 'FailedPrecondition', "the VM's own disk is not the driver's to detach");
  t.ok(cfg().has('unused0'));
  t.equal(f.count('unlinkDisks'), 0);
});

t.test('attach over a pending delete of the same disk finishes the detach first', async (t) => {
  fakeClock(t);
  const { f, q, req } = setup();
  const r = req('pvc-a');
  const vm = f.vmOf(102);
  vm.config.set('scsi7', `local-lvm:${r.disk},wwn=${wwnForSlot(7)}`);
  vm.pendingDelete.add('scsi7');
  const slot = await q.attach(WORKER1, r);
  t.equal(slot, 1);
  t.notOk(vm.config.has('scsi7'));
  t.equal(f.count('unlinkDisks'), 1);
});

t.test('follows a VM that migrated to another node', async (t) => {
  fakeClock(t);
  const { f, q, req } = setup();
  const r = req('pvc-a');
  await q.attach(WORKER1, r);
  f.vmOf(102).node = 'hyper2';
  await q.detach(WORKER1, r);
  t.notOk(f.vmOf(102).config.has('scsi1'));
  t.equal(f.calls.find((c) => c.method === 'unlinkDisks')?.args[0], 'hyper2', 'unlinked on the new node');
});

t.test('storm: attaches and detaches mixed, with latency and lost answers', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup(2000);
  f.latencyMs = 3;
  const reqs = Array.from({ length: 16 }, (_, i) => req(`pvc-${i}`));
  await Promise.all(reqs.slice(0, 8).map((r) => q.attach(WORKER1, r)));
  f.faults.dropAfter.set('updateVmConfig', 2);
  f.faults.dropAfter.set('unlinkDisks', 1);
  f.faults.lockTimeouts = 2;
  await Promise.all([
    ...reqs.slice(0, 8).map((r) => q.detach(WORKER1, r)),
    ...reqs.slice(8).map((r) => q.attach(WORKER1, r)),
  ]);
  const disks = [...cfg()].filter(([k]) => /^scsi([1-9]|[12]\d|30)$/.test(k)).map(([, v]) => v.split(',')[0]);
  t.same(
    disks.sort(),
    reqs
      .slice(8)
      .map((r) => `local-lvm:${r.disk}`)
      .sort(),
    'exactly the second half is attached',
  );
  t.equal(f.slotConflicts, 0);
  t.equal(f.maxConcurrentWriters, 1);
});

t.test('helper attachments (offline expansion) and publishes of the same disk never mix', async (t) => {
  fakeClock(t);
  const { f, q, req, cfg } = setup();
  const helper = (name: string) => req(name, { options: HELPER_DRIVE_OPTIONS, exclusive: false, helper: true });
  t.equal(await q.attach(WORKER1, helper('pvc-h')), 1);
  t.equal(
    cfg().get('scsi1'),
    `local-lvm:vm-9999-pvc-h,backup=0,wwn=${helperWwnForSlot(1)}`,
    'helper WWN, backup=0, no tuning',
  );
  t.not(helperWwnForSlot(1), wwnForSlot(1), "never the node's PVC-ID WWN");
  t.ok(isHelperWwn(helperWwnForSlot(30)) && !isHelperWwn(wwnForSlot(1)) && !isHelperWwn(undefined));
  t.equal(await q.attach(WORKER1, helper('pvc-h')), 1, 'helper attach is idempotent');

  const err = await q.attach(CP1, req('pvc-h')).catch((e: unknown) => e);
  t.ok(err instanceof HelperLeftovers, 'an exclusive publish elsewhere names the helper leftover');
  t.same((err as HelperLeftovers).vms, [WORKER1]);
  t.equal((err as HelperLeftovers).kind, 'FailedPrecondition');

  f.resetCalls();
  const slot = await q.attach(WORKER1, req('pvc-h'));
  t.equal(
    cfg().get(`scsi${slot}`),
    `local-lvm:vm-9999-pvc-h,backup=0,iothread=1,wwn=${wwnForSlot(slot)}`,
    'a publish to the helper VM replaces the helper attachment',
  );
  t.same(
    [...cfg().keys()].filter((k) => cfg().get(k)?.includes('pvc-h')),
    [`scsi${slot}`],
    'one attachment left',
  );
  t.equal(f.count('unlinkDisks'), 1, 'the helper attachment was unlinked first');

  const before = [...cfg()];
  t.equal(await kindOf(q.attach(WORKER1, helper('pvc-h'))), 'Aborted', 'a helper attach never takes over a publish');
  t.same([...cfg()], before, 'config untouched');
  t.equal(f.slotConflicts, 0);
});
