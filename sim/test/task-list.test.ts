// GET /nodes/{node}/tasks as pve-manager's PVE::API2::Tasks node_tasks answers it: the active
// list (running tasks, token id unsplit, status RUNNING), the archive (finished, newest first,
// token split), the filters and `total`, and who sees which task.

import t from 'tap';
import { AUDITOR, NOBODY, defaultConfig, startTestSim } from './fixtures/helpers.js';

const cfg = defaultConfig();
cfg.tokens.push(AUDITOR, NOBODY, {
  id: 'kubernetes-csi@pve!other',
  secret: '22222222-3333-4444-5555-666666666666',
  role: 'CSI',
});
const ts = await startTestSim({ config: cfg, faults: { lockTimeoutMs: 10_000 } });
t.teardown(() => ts.close());
const { call, callAs, admin, waitTask } = ts;
type Row = Record<string, unknown>;
const rows = (r: { body: { data?: unknown } | null }) => r.body?.data as Row[];

t.test('a config POST waiting for the VM lock is a running qmconfig task in the active list', async (t) => {
  await admin.holdLock({ vmid: 111 }, 1500);
  const post = await call('POST', '/nodes/hyper1/qemu/111/config', { delete: 'scsi9' });
  const upid = post.body?.data as string;
  const active = await call('GET', '/nodes/hyper1/tasks', { source: 'active', typefilter: 'qmconfig' });
  t.equal(active.status, 200);
  t.equal(active.body?.total, 1);
  const [row] = rows(active);
  t.match(row, {
    upid,
    node: 'hyper1',
    type: 'qmconfig',
    id: '111',
    user: 'kubernetes-csi@pve!csi',
    status: 'RUNNING',
    saved: '0',
  });
  t.type(row?.pid, 'number');
  t.type(row?.pstart, 'number');
  t.type(row?.starttime, 'number');
  t.notOk(row && 'tokenid' in row, 'the active list is decoded from the UPID only: the token id stays whole');
  t.notOk(row && 'endtime' in row);
  t.same(
    rows(await call('GET', '/nodes/hyper2/tasks', { source: 'active' })),
    [],
    'a task is listed on its own node only',
  );
  t.same(rows(await call('GET', '/nodes/hyper1/tasks', { source: 'active', vmid: 101 })), [], 'vmid filter');
  t.same(
    rows(await call('GET', '/nodes/hyper1/tasks', { source: 'active', typefilter: 'qmstart' })),
    [],
    'typefilter is exact',
  );
  t.same(rows(await call('GET', '/nodes/hyper1/tasks', { source: 'archive' })), [], 'not archived while it runs');

  // Without Sys.Audit a token sees only its own tasks, even another token of the same user.
  const other = await callAs(
    'PVEAPIToken=kubernetes-csi@pve!other=22222222-3333-4444-5555-666666666666',
    'GET',
    '/nodes/hyper1/tasks',
    { source: 'active' },
  );
  t.same(rows(other), []);
  t.equal(other.body?.total, 0);
  const auditor = await callAs(`PVEAPIToken=${AUDITOR.id}=${AUDITOR.secret}`, 'GET', '/nodes/hyper1/tasks', {
    source: 'active',
  });
  t.same(
    rows(auditor).map((r) => r.upid),
    [upid],
    'Sys.Audit sees every task of the node',
  );
  const byUser = await callAs(`PVEAPIToken=${AUDITOR.id}=${AUDITOR.secret}`, 'GET', '/nodes/hyper1/tasks', {
    source: 'active',
    userfilter: 'KUBERNETES-csi',
  });
  t.equal(rows(byUser).length, 1, 'userfilter is a substring match, any case');

  await waitTask('hyper1', upid);
  t.same(
    rows(await call('GET', '/nodes/hyper1/tasks', { source: 'active' })),
    [],
    'gone from the active list when it ended',
  );
  const archive = rows(await call('GET', '/nodes/hyper1/tasks'));
  t.equal(archive.length, 1);
  t.match(archive[0], {
    upid,
    type: 'qmconfig',
    id: '111',
    user: 'kubernetes-csi@pve',
    tokenid: 'csi',
    status: 'WARNINGS: 1',
  });
  t.type(archive[0]?.endtime, 'number');
});

t.test('archive order, start/limit/total, errors and statusfilter', async (t) => {
  await admin.reset();
  const upids: string[] = [];
  for (let i = 0; i < 3; i++) {
    // deleting a key that is not set: a task that ends `WARNINGS: 1`
    const upid = (await call('POST', '/nodes/hyper2/qemu/112/config', { delete: 'scsi9' })).body?.data as string;
    await waitTask('hyper2', upid);
    upids.push(upid);
    await new Promise((r) => setTimeout(r, 1100)); // endtime has one-second resolution
  }
  await admin.patchFaults({ taskFailRate: 1, taskFailMessage: 'got timeout' });
  const failed = (await call('POST', '/nodes/hyper2/qemu/112/config', { delete: 'scsi9' })).body?.data as string;
  await waitTask('hyper2', failed);
  await admin.patchFaults({ taskFailRate: 0 });

  const all = await call('GET', '/nodes/hyper2/tasks');
  t.same(
    rows(all).map((r) => r.upid),
    [failed, ...upids.reverse()],
    'newest first',
  );
  t.equal(all.body?.total, 4);
  const page = await call('GET', '/nodes/hyper2/tasks', { start: 1, limit: 2 });
  t.same(
    rows(page).map((r) => r.upid),
    [upids[0], upids[1]],
  );
  t.equal(page.body?.total, 4, 'total counts every match, not the page');
  const errs = rows(await call('GET', '/nodes/hyper2/tasks', { statusfilter: 'error' }));
  t.same(
    errs.map((r) => [r.upid, r.status]),
    [[failed, 'got timeout']],
  );
  t.same(
    rows(await call('GET', '/nodes/hyper2/tasks', { statusfilter: 'warning,ok' })).map((r) => r.status),
    ['WARNINGS: 1', 'WARNINGS: 1', 'WARNINGS: 1'],
  );
  // Tasks.pm: `errors` only drops OK tasks; warnings stay.
  t.equal(rows(await call('GET', '/nodes/hyper2/tasks', { errors: 1 })).length, 4);
  t.same(rows(await call('GET', '/nodes/hyper2/tasks', { statusfilter: 'ok' })), []);
  const bad = await call('GET', '/nodes/hyper2/tasks', { source: 'running' });
  t.equal(bad.status, 400);
  t.same(bad.body?.errors, {
    source: "value 'running' does not have a value in the enumeration 'archive, active, all'",
  });
  const denied = await callAs(`PVEAPIToken=${NOBODY.id}=${NOBODY.secret}`, 'GET', '/nodes/hyper2/tasks');
  t.equal(denied.status, 200, 'any user may ask');
  t.same(rows(denied), [], 'and sees only its own tasks');
});
