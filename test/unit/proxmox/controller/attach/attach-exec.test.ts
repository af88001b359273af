// The attach queue's executor, reader and failure classes on their own, against the fake
// Proxmox: which calls one change costs (with and without the task list the exclusivity
// re-check needs), what a failed task in that list means, that the digest of the plan's read
// goes with every write, and how a read follows a migrated VM.
import t from 'tap';
import { AlreadyExists, Busy, FailedPrecondition, Internal, NotFound, Unavailable } from '../../../../../src/errors.js';
import { taskError } from '../../../../../src/proxmox/api/errors.js';
import { ConfigExecutor } from '../../../../../src/proxmox/controller/attach/attach-exec.js';
import { OwnershipPort } from '../../../../../src/proxmox/controller/safety/ownership-port.js';
import { failureOf } from '../../../../../src/proxmox/controller/attach/attach-retry.js';
import { DiskIndex } from '../../../../../src/proxmox/controller/state/disk-index.js';
import { VmLocator } from '../../../../../src/proxmox/controller/state/vm-locator.js';
import { VmReader } from '../../../../../src/proxmox/controller/attach/vm-state.js';
import { rejection } from '../../../../helpers/rejection.js';
import { fakeClock } from '../../../../helpers/fake-clock.js';
import { seedCluster } from '../../api/fake-api.js';

const WORKER1 = { vmid: 102, node: 'hyper1', name: 'talos-worker-1' };
const DRIVE = 'local-lvm:vm-9999-pvc-exec,iothread=1,size=1G';

/** The index records this process's own tasks (so the re-check does not wait for them). */
class SpyIndex extends DiskIndex {
  readonly mined: string[] = [];
  override mine(upid: string): void {
    this.mined.push(upid);
    super.mine(upid);
  }
}

function setup() {
  const f = seedCluster();
  f.storageOf('hyper1', 'local-lvm').volumes.set('vm-9999-pvc-exec', 2 ** 30);
  const locator = new VmLocator(f, { cluster: 'homelab' });
  const index = new SpyIndex(f, locator);
  const exec = new ConfigExecutor({ api: f, port: new OwnershipPort(f), cluster: 'homelab', index, maxAgeMs: 5_000 });
  const reader = new VmReader({ api: f, cluster: 'homelab', locator, index, confirmTimeoutMs: 300 });
  return { f, index, exec, reader, vm: { ...WORKER1 } };
}

const methods = (f: ReturnType<typeof seedCluster>) => f.calls.map((c) => c.method);

t.test('a change without the task list: POST, then the task status', async (t) => {
  const { f, index, exec, vm } = setup();
  const sent = await exec.change(vm, [], { set: { scsi1: DRIVE } }, 'attach disks to', false);
  t.same(sent, { landed: undefined }, 'a task was started; no list was read');
  t.same(methods(f), ['updateVmConfig', 'taskStatus']);
  t.equal(index.mined.length, 1, 'the task is recorded as this process’s own');
  t.equal(f.vmOf(102).config.get('scsi1'), DRIVE);
});

t.test('a change with the task list: its status comes from the list, no task poll', async (t) => {
  const { f, exec, vm } = setup();
  const sent = await exec.change(vm, [], { set: { scsi1: DRIVE } }, 'attach disks to', true);
  t.same(methods(f), ['updateVmConfig', 'nodeTasks']);
  t.equal(sent?.landed?.node, 'hyper1');
  t.same(
    sent?.landed?.tasks.map((task) => [task.type, task.id, task.status]),
    [['qmconfig', '102', 'OK']],
    'the list (this change’s task) is handed back for the re-check',
  );
});

t.test('a failed task in the list is the task error (typed by its exit status)', async (t) => {
  const { f, exec, vm } = setup();
  f.faults.taskExits.push("can't lock file '/var/lock/qemu-server/lock-102.conf' - got timeout");
  const err = await rejection(exec.change(vm, [], { set: { scsi1: DRIVE } }, 'attach disks to', true));
  t.equal(err.kind, 'Aborted', 'a lock timeout is ABORTED');
  t.match(err.message, /attach disks to VM talos-worker-1 \(102\) on hyper1: task failed: can't lock file/);
  t.same(methods(f), ['updateVmConfig', 'nodeTasks'], 'the status read from the list, not polled');
  t.equal(failureOf(err), 'busy', 'retried after a read');

  f.resetCalls();
  f.faults.taskExits.push('hotplug problem - some error');
  const other = await rejection(exec.change(vm, [], { set: { scsi1: DRIVE } }, 'attach disks to', false));
  t.equal(other.kind, 'Unavailable');
  t.same(methods(f), ['updateVmConfig', 'taskStatus']);
  t.equal(failureOf(other), 'failed', 'a failed task has a known outcome');
});

t.test('a read splits off the digest; unlink sends the digest it is given', async (t) => {
  const { f, exec, reader, vm } = setup();
  const pending = f.vmPending.bind(f);
  f.vmPending = async (node, vmid, o) => [...(await pending(node, vmid, o)), { key: 'digest', value: 'd1' }];
  const state = await reader.read(vm);
  t.equal(state.digest, 'd1', 'the read carries the digest');
  t.notOk(
    state.entries.some((e) => e.key === 'digest'),
    'the digest is not an entry',
  );
  f.vmOf(102).config.set('scsi1', DRIVE);
  const entries = [{ key: 'scsi1', value: DRIVE }];
  const err = await rejection(exec.unlink(vm, ['scsi1'], entries, 'a stale digest'));
  t.equal(failureOf(err), 'busy', 'a changed config refuses the unlink: read again');
  t.ok(f.vmOf(102).config.has('scsi1'), 'nothing unlinked');
  t.equal(f.calls.find((c) => c.method === 'unlinkDisks')?.args[3], 'a stale digest', 'sent with the digest');
  await exec.unlink(vm, ['scsi1'], entries, undefined);
  t.notOk(f.vmOf(102).config.has('scsi1'));
});

t.test('failure classes: only ABORTED is busy, only a known refusal is final', async (t) => {
  const rows: Array<[unknown, string]> = [
    [new Busy('locked'), 'busy'],
    [new Unavailable('socket hang up'), 'uncertain'],
    [new Internal('500'), 'uncertain'],
    [new AlreadyExists('answer lost, repeated'), 'uncertain'],
    [new Error('a programming error'), 'uncertain'],
    [new FailedPrecondition('hotplug problem'), 'refused'],
    [new NotFound('no such VM'), 'failed'],
    [taskError('unable to parse drive options', { cluster: 'c', what: 'w' }), 'failed'],
    [taskError("can't lock file - got timeout", { cluster: 'c', what: 'w' }), 'busy'],
  ];
  for (const [e, want] of rows) t.equal(failureOf(e), want, (e as Error).message);
});

t.test('a read follows a VM that migrated; a VM gone is NotFound with its name', async (t) => {
  const { f, reader, vm } = setup();
  f.vmOf(102).node = 'hyper2';
  await reader.read(vm);
  t.equal(vm.node, 'hyper2', 'the ref follows the VM');
  t.same(methods(f), ['vmPending', 'vmResources', 'vmPending']);

  f.vms.delete(102);
  const err = await rejection(reader.read(vm));
  t.equal(err.kind, 'NotFound');
  t.match(err.message, /VM talos-worker-1 \(102\) no longer exists in Proxmox cluster homelab/);
});

t.test('poll re-reads until done, else returns the last read at the confirm timeout', async (t) => {
  fakeClock(t);
  const { f, reader, vm } = setup();
  let reads = 0;
  const s = await reader.poll(vm, () => ++reads === 3);
  t.equal(reads, 3);
  t.equal(f.count('vmPending'), 3);
  t.ok(s.entries.length > 0);

  f.resetCalls();
  const started = Date.now();
  await reader.poll(vm, () => false);
  t.ok(Date.now() - started <= 300, 'never waits past the confirm timeout');
  t.ok(f.count('vmPending') >= 3, 'backs off between reads');
});
