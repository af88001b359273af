// docs/design.md#start-up-fence, the crash window: a `POST …/config` sent by a previous controller process that was
// killed (kill -9) can still be waiting for the VM config lock in Proxmox (qemu-server takes
// the lock inside the forked `qmconfig` worker and waits up to 10 s) and land after a fresh
// process published the same single-writer disk elsewhere. The dead process is simulated by
// sending that POST straight to the simulator with the driver's token while another client
// holds the VM's lock, then dropping the connection.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import type * as T from '../../../src/csi/types.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { wwnForSlot } from '../../../src/proxmox/contract.js';
import { GiB, driveString } from '../../../src/proxmox/controller/params/params.js';
import { callCtx, createReq, expandReq, publishReq as pubReq } from '../../helpers/csi-requests.js';
import { outcome as kind } from '../../helpers/outcome.js';
import { proxmoxController, startSimCluster } from '../../helpers/proxmox-on-sim.js';
import type { Teardown } from '../../helpers/teardown.js';
import { holdersOf } from '../../helpers/sim-state.js';
import { present } from '../../helpers/present.js';
import { createdId } from '../../helpers/created.js';

const ctx = (ms = 60_000): T.CallContext => ({ ...callCtx(ms), deadline: Date.now() + ms });

async function start(t: Teardown) {
  // lockTimeoutMs: Proxmox's own 10 s, so the dead process's change waits behind the held lock.
  const { admin, cluster, state } = await startSimCluster(t, { faults: { lockTimeoutMs: 10_000 } });
  const controller = (startupFenceMs?: number) =>
    proxmoxController(t, cluster, {
      queryTimeoutMs: 15_000,
      tuning: { ...(startupFenceMs !== undefined && { startupFenceMs }) },
    });
  const holders = async (disk: string) => holdersOf(await state(), disk);
  /** What the killed process did last: its attach POST to VM 111 (talos-worker-1), then it died. */
  const deadProcessAttach = async (disk: string): Promise<string> => {
    const api = createHttpProxmoxApi({ cluster });
    const upid = await api.updateVmConfig('hyper1', 111, {
      set: {
        scsi1: driveString(
          'local-lvm',
          disk,
          { backup: true, iothread: true, ssd: true, readonly: false },
          wwnForSlot(1),
        ),
      },
    });
    await api.close();
    return upid ?? '';
  };
  /**
   * A previous process created `name`, sent its attach to VM 111 while another client held that
   * VM's lock for `holdMs`, and died: the POST waits in Proxmox. Its task, and when the lock goes.
   */
  const afterDeadAttach = async (name: string, holdMs: number) => {
    const old = controller();
    const id = await createdId(old.createVolume(createReq(name), ctx()));
    await old.close();
    const released = Date.now() + holdMs;
    await admin.holdLock({ vmid: 111 }, holdMs);
    const upid = await deadProcessAttach(`vm-9999-${name}`);
    return { id, upid, released };
  };
  return { admin, controller, holders, afterDeadAttach };
}

/** Samples the disk's holders until stopped; returns the most VMs seen holding it at once. */
function sampleHolders(holders: (d: string) => Promise<string[]>, disk: string) {
  let max = 0;
  let seen: string[] = [];
  const stop = new AbortController();
  const loop = (async () => {
    while (!stop.signal.aborted) {
      const on = await holders(disk);
      if (on.length > max) {
        max = on.length;
        seen = on;
      }
      await sleep(50);
    }
  })();
  return async () => {
    stop.abort();
    await loop;
    return { max, seen };
  };
}

t.test('a lock-waiting attach of a killed process: a fresh controller refuses to publish elsewhere', async (t) => {
  const { controller, holders, afterDeadAttach } = await start(t);
  const { id, upid, released } = await afterDeadAttach('pvc-crash', 6000);
  t.match(
    upid,
    /^UPID:hyper1:[0-9A-F]{8}:[0-9A-F]{8,9}:[0-9A-F]{8}:qmconfig:111:kubernetes-csi@pve!csi:$/,
    'the POST is a qmconfig task waiting for the lock',
  );
  const stop = sampleHolders(holders, 'vm-9999-pvc-crash');

  const fresh = controller();
  const first = await kind(fresh.controllerPublishVolume(pubReq(id, 'talos-cp-1'), ctx(3000)));
  t.equal(first.kind, 'Aborted', "ABORTED while the dead process's change may still land");
  t.match(first.message, upid, 'the message names the task');
  // A caller with time to wait sees the task end (the lock is released at 6 s) and the attach land.
  const second = await kind(fresh.controllerPublishVolume(pubReq(id, 'talos-cp-1'), ctx(15_000)));
  t.equal(second.kind, 'FailedPrecondition', "after the dead process's attach landed: FAILED_PRECONDITION");
  t.match(second.message, /talos-worker-1/);
  await sleep(Math.max(0, released + 500 - Date.now()));
  const { max, seen } = await stop();
  t.ok(max <= 1, `the disk was never on two VMs (at most on ${seen.join(', ')})`);
  t.same(await holders('vm-9999-pvc-crash'), ['talos-worker-1'], "only the dead process's attachment is there");

  // The CO detaches it from the old node; the publish to the new one then works.
  await fresh.controllerUnpublishVolume({ volumeId: id, nodeId: 'talos-worker-1', secrets: {} }, ctx());
  const third = await fresh.controllerPublishVolume(pubReq(id, 'talos-cp-1'), ctx());
  t.equal(third.publishContext?.lun, '1');
  t.same(await holders('vm-9999-pvc-crash'), ['talos-cp-1']);
});

t.test("a publish that waits for the dead process's task: FAILED_PRECONDITION, never two VMs", async (t) => {
  const { controller, holders, afterDeadAttach } = await start(t);
  const { id, released } = await afterDeadAttach('pvc-crash-wait', 3000);
  const stop = sampleHolders(holders, 'vm-9999-pvc-crash-wait');
  const fresh = controller();
  const r = await kind(fresh.controllerPublishVolume(pubReq(id, 'talos-cp-1'), ctx(15_000)));
  t.equal(r.kind, 'FailedPrecondition');
  await sleep(Math.max(0, released + 500 - Date.now()));
  const { max } = await stop();
  t.ok(max <= 1, 'never on two VMs');
  t.same(await holders('vm-9999-pvc-crash-wait'), ['talos-worker-1']);
});

t.test('after the start-up window an exclusive publish lists no running tasks before it', async (t) => {
  const { admin, controller, holders } = await start(t);
  const c = controller(300);
  const id = await createdId(c.createVolume(createReq('pvc-after-window'), ctx()));
  await sleep(400);
  const since = (await admin.requests()).lastSeq;
  await c.controllerPublishVolume(pubReq(id, 'talos-cp-1'), ctx());
  const entries = (await admin.requests(since)).entries;
  const routes = entries.map((e) => e.route);
  // The one task list left is the re-check after landing (disk-index.ts): source=all, after the POST.
  const lists = entries.filter((e) => e.route === 'GET /nodes/{node}/tasks');
  t.notOk(
    lists.some((e) => e.params?.source === 'active'),
    `no running-task list read (${routes.join(', ')})`,
  );
  t.ok(
    lists.length <= 1 && lists.every((e) => e.params?.source === 'all'),
    'only the re-check after landing lists tasks',
  );
  t.ok(
    routes.indexOf('POST /nodes/{node}/qemu/{vmid}/config') < routes.indexOf('GET /nodes/{node}/tasks'),
    'and only after the change was sent',
  );
  t.same(await holders('vm-9999-pvc-after-window'), ['talos-cp-1']);
});

t.test('inside the window: one task list read per candidate node, own tasks are not waited for', async (t) => {
  const { admin, controller, holders } = await start(t);
  const c = controller(60_000);
  const [a, b] = await Promise.all(
    ['a', 'b'].map(async (n) => await createdId(c.createVolume(createReq(`pvc-in-window-${n}`), ctx()))),
  );
  // Each config task of this process runs 3 s; the second publish lists the first one's task
  // as running and must not wait for it (it is this process's own, its fence covers it).
  await admin.patchFaults({ taskDurationMs: 3000 });
  const since = (await admin.requests()).lastSeq;
  const first = c.controllerPublishVolume(pubReq(present(a, 'the first volume'), 'talos-cp-1'), ctx());
  await sleep(800);
  const t0 = Date.now();
  await c.controllerPublishVolume(pubReq(present(b, 'the second volume'), 'talos-worker-1'), ctx());
  const took = Date.now() - t0;
  await first;
  // The start-up fence's lists (source=active); the re-check after landing lists with source=all.
  const lists = (await admin.requests(since)).entries.filter(
    (e) => e.route === 'GET /nodes/{node}/tasks' && e.params?.source === 'active',
  );
  t.equal(lists.length, 2, 'one active task list per publish (all candidates on hyper1)');
  t.ok(
    lists.every((e) => e.params?.typefilter === 'qmconfig'),
    'source=active, typefilter=qmconfig',
  );
  t.ok(took < 5000, `no wait for the process's own task (second publish took ${took} ms, its own task 3 s)`);
  t.same(await holders('vm-9999-pvc-in-window-a'), ['talos-cp-1']);
  t.same(await holders('vm-9999-pvc-in-window-b'), ['talos-worker-1']);
});

// The same rule for ControllerExpandVolume: an unattached volume is expanded offline through a
// helper VM, and a volume with a pending change is refused; a change the dead process sent that
// still waits for the lock is in neither place yet. Inside the window the expansion first waits
// for it (or answers ABORTED naming it), then reads where the disk is: here on talos-worker-1,
// so it is resized there (online, the guest sees the new size), never through a helper VM while
// the attach lands.
t.test("an expansion waits for a killed process's attach of the volume, then resizes through that VM", async (t) => {
  const { admin, controller, holders, afterDeadAttach } = await start(t);
  const { id, upid } = await afterDeadAttach('pvc-crash-expand', 4000);
  const since = (await admin.requests()).lastSeq;
  const stop = sampleHolders(holders, 'vm-9999-pvc-crash-expand');

  const fresh = controller();
  const first = await kind(fresh.controllerExpandVolume(expandReq(id, 2 * GiB), ctx(2000)));
  t.equal(first.kind, 'Aborted', "ABORTED while the dead process's change may still land");
  t.match(first.message, upid, 'the message names the task');
  const second = await kind(fresh.controllerExpandVolume(expandReq(id, 2 * GiB), ctx(15_000)));
  t.equal(second.kind, 'ok', `expanded once the attach landed (${second.message})`);
  const { max, seen } = await stop();
  const entries = (await admin.requests(since)).entries;
  t.same(
    entries
      .filter((e) => e.route === 'PUT /nodes/{node}/qemu/{vmid}/resize' && e.status === 200)
      .map((e) => /\/qemu\/(\d+)\//.exec(e.path)?.[1]),
    ['111'],
    'resized through talos-worker-1 (111), where the disk landed',
  );
  t.notOk(
    entries.some((e) => e.route === 'POST /nodes/{node}/qemu/{vmid}/config'),
    'no helper attachment was made',
  );
  t.ok(max <= 1, `the disk was never on two VMs (at most on ${seen.join(', ')})`);
  t.same(await holders('vm-9999-pvc-crash-expand'), ['talos-worker-1']);
});
