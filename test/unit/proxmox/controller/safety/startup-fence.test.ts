// The start-up fence's rules against a scripted task list: which running tasks it waits for
// (qmconfig, our identity, not our own), when it stops waiting, when it refuses, and that it
// costs nothing after its window. The simulator version is test/integration/proxmox/sim-startup-fence.test.ts.
import t from 'tap';
import pino from 'pino';
import { isCsiError } from '../../../../../src/errors.js';
import type { ActiveTask, ProxmoxApi, TaskStatus } from '../../../../../src/proxmox/api/api.js';
import { StartupFence } from '../../../../../src/proxmox/controller/safety/startup-fence.js';
import { fakeClock } from '../../../../helpers/fake-clock.js';

const ME = 'kubernetes-csi@pve!csi';
const log = pino({ level: 'silent' });
const upid = (n: number, type = 'qmconfig', user = ME) =>
  `UPID:hyper1:0000000${String(n)}:00000001:6B0E145F:${type}:111:${user}:`;
const task = (n: number, type = 'qmconfig', user = ME): ActiveTask => ({
  upid: upid(n, type, user),
  node: 'hyper1',
  type,
  id: '111',
  user,
  starttime: 0,
});

/** Only the calls the fence makes; `running` is what the task list shows, `endsAfter` when each stops. */
function fakeApi(running: ActiveTask[], endsAfterMs: Record<string, number> = {}) {
  const calls: string[] = [];
  const t0 = Date.now();
  const api = {
    activeTasks: (node: string) => {
      calls.push(`list ${node}`);
      return Promise.resolve(running.filter((x) => x.node === node));
    },
    taskStatus: (_node: string, id: string): Promise<TaskStatus> => {
      calls.push('status');
      const ends = endsAfterMs[id] ?? Infinity;
      return Promise.resolve(Date.now() - t0 >= ends ? { status: 'stopped', exitstatus: 'OK' } : { status: 'running' });
    },
    updateVmConfig: () => Promise.resolve(upid(9)),
  } as unknown as ProxmoxApi;
  return { api, calls };
}

t.test('no foreign task: one list per node, no wait', async (t) => {
  fakeClock(t);
  const { api, calls } = fakeApi([task(1, 'qmstart'), task(2, 'qmconfig', 'someone@pve!other')]);
  const f = new StartupFence(api, { cluster: 'homelab', identity: ME, log });
  await f.settle(['hyper1', 'hyper2', 'hyper1'], 'publishing x');
  t.same(calls, ['list hyper1', 'list hyper2'], 'other types and other identities are not waited for');
});

t.test('waits for a foreign qmconfig task of our identity until it stops', async (t) => {
  fakeClock(t);
  const { api, calls } = fakeApi([task(1)], { [upid(1)]: 300 });
  const f = new StartupFence(api, { cluster: 'homelab', identity: ME, log });
  const t0 = Date.now();
  await f.settle(['hyper1'], 'publishing x', { deadline: Date.now() + 10_000 });
  t.ok(Date.now() - t0 >= 300, 'returned after the task stopped');
  t.ok(calls.filter((c) => c === 'status').length >= 1);
});

t.test('refuses with ABORTED naming the task when the deadline comes first', async (t) => {
  fakeClock(t);
  const { api } = fakeApi([task(1)]);
  const f = new StartupFence(api, { cluster: 'homelab', identity: ME, log });
  const err = await f.settle(['hyper1'], 'publishing x', { deadline: Date.now() + 800 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(isCsiError(err, 'Aborted'), 'ABORTED');
  t.match((err as Error).message, upid(1));
});

t.test('a task seen running is waited for at most the window (its lock wait is over then)', async (t) => {
  fakeClock(t);
  const { api } = fakeApi([task(1)]);
  const f = new StartupFence(api, { cluster: 'homelab', identity: ME, log, windowMs: 400 });
  const t0 = Date.now();
  await f.settle(['hyper1'], 'publishing x');
  t.ok(Date.now() - t0 < 2_000, `returned after the horizon (${String(Date.now() - t0)} ms)`);
});

t.test("the process's own config changes are not waited for; unknown identity: any user's", async (t) => {
  fakeClock(t);
  const own = fakeApi([task(9)]);
  const f = new StartupFence(own.api, { cluster: 'homelab', identity: ME, log });
  const mine = await own.api.updateVmConfig('hyper1', 111, { set: {} });
  if (mine) f.noteOwn(mine);
  await f.settle(['hyper1'], 'publishing x', { deadline: Date.now() + 500 });
  t.pass('own task ignored');
  const any = fakeApi([task(2, 'qmconfig', 'root@pam')]);
  const g = new StartupFence(any.api, { cluster: 'homelab', log });
  const err = await g.settle(['hyper1'], 'publishing x', { deadline: Date.now() + 500 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(isCsiError(err, 'Aborted'), 'without a known identity every visible qmconfig task counts');
});

t.test('after the window: no call at all', async (t) => {
  fakeClock(t);
  const { api, calls } = fakeApi([task(1)]);
  const f = new StartupFence(api, { cluster: 'homelab', identity: ME, log, windowMs: 0 });
  t.notOk(f.open);
  await f.settle(['hyper1'], 'publishing x');
  t.same(calls, []);
});
