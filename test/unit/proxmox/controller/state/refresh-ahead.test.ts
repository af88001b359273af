// No request waits for a cache refresh it does not need (bench/results/2026-12-02-proxmox-tail-latency.md, reads per RPC):
// with warm caches the happy path of each operation makes exactly its budgeted calls and no
// read of a cached view; and while requests keep coming, the cached views (storage rows, VM
// list, storage contents, pool status) are re-read in the background before they expire, so an
// operation never waits for one — checked by holding every such read until the operation has
// answered, across several TTLs.
import t from 'tap';
import pino from 'pino';
import { install } from '@sinonjs/fake-timers';
import type * as T from '../../../../../src/csi/types.js';
import type { ProxmoxApi } from '../../../../../src/proxmox/api/api.js';
import { createProxmoxController } from '../../../../../src/proxmox/controller/controller.js';
import { CONTROLLER_METHODS, implemented } from '../../../../helpers/implemented.js';
import { createReq, publishReq } from '../../../../helpers/csi-requests.js';
import { PROXMOX_CALL_BUDGET } from '../../../../helpers/proxmox-call-budget.js';
import { FakeProxmox, seedCluster } from '../../api/fake-api.js';

const TTL = 5_000;
const VM = 'talos-worker-1';
const PARAMS = { storage: 'local-lvm', ssd: 'true' };
/**
 * The cached views' reads (the VM list is also the delete's fresh read, the storage status the
 * pool guard's fresh read on CreateVolume: see below).
 */
const CACHED: ReadonlyArray<keyof ProxmoxApi> = ['storageResources', 'storageStatus', 'listContent', 'vmResources'];

/**
 * The fake answers GET …/pending without a digest, so an unpublish reads the VM back to verify
 * the unlink (attach-queue.ts), where Proxmox's digest makes the synchronous answer the proof.
 */
const FAKE_EXTRA: Partial<Record<keyof typeof PROXMOX_CALL_BUDGET, number>> = { ControllerUnpublishVolume: 1 };

const ctx = (): T.CallContext => ({ log: pino({ level: 'silent' }), signal: new AbortController().signal });

type Hold = (method: keyof ProxmoxApi, args: unknown[]) => boolean;

/** The fake whose reads `hold` picks wait until release(). */
function heldFake(): {
  f: FakeProxmox;
  setHold: (h: Hold | undefined) => void;
  held: () => number;
  release: () => void;
} {
  const f = seedCluster();
  let hold: Hold | undefined;
  let waiting: Array<() => void> = [];
  for (const m of [...CACHED, 'vmPending'] as const) {
    const orig = (f[m] as (...a: unknown[]) => Promise<unknown>).bind(f);
    Object.assign(f, {
      [m]: async (...a: unknown[]) => {
        if (hold?.(m, a)) await new Promise<void>((r) => waiting.push(r));
        return orig(...a);
      },
    });
  }
  return {
    f,
    setHold: (h) => (hold = h),
    held: () => waiting.length,
    release: () => {
      const w = waiting;
      waiting = [];
      for (const r of w) r();
    },
  };
}

function controller(f: FakeProxmox) {
  return implemented(
    createProxmoxController({
      config: {
        clusters: [{ url: 'https://unused', insecure: false, tokenId: 'a@pve!b', tokenSecret: 'x', region: 'homelab' }],
        controllerVmId: 9999,
      },
      log: pino({ level: 'silent' }),
      api: () => f,
      tuning: { cacheTtlMs: TTL, startupFenceMs: 0, queue: { confirmTimeoutMs: 200 } },
    }),
    CONTROLLER_METHODS,
  );
}

/** Resolves with the operation's result, or fails when it has not answered within 2 s (real time). */
async function answers<R>(what: string, p: Promise<R>): Promise<R> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} waited for a held cache read`)), 2_000);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

type C = ReturnType<typeof controller>;
const ops = (c: C, name: string) => {
  let id = '';
  return [
    [
      'CreateVolume',
      async () => {
        const r = await c.createVolume(createReq(name, { parameters: PARAMS }), ctx());
        id = r.volume?.volumeId ?? '';
      },
    ],
    ['ControllerPublishVolume', () => c.controllerPublishVolume(publishReq(id, VM, PARAMS), ctx())],
    ['ControllerUnpublishVolume', () => c.controllerUnpublishVolume({ volumeId: id, nodeId: VM, secrets: {} }, ctx())],
    ['DeleteVolume', () => c.deleteVolume({ volumeId: id, secrets: {} }, ctx())],
  ] as const;
};

t.test('warm caches: each operation makes its budgeted calls and reads no cached view', async (t) => {
  const clock = install({ toFake: ['Date'] });
  t.teardown(() => clock.uninstall());
  const f = seedCluster();
  const c = controller(f);
  for (const [, run] of ops(c, 'pvc-warm')) await run();
  for (const [op, run] of ops(c, 'pvc-counted')) {
    clock.tick(100);
    f.resetCalls();
    await run();
    const methods = f.calls.map((x) => x.method);
    // DeleteVolume's VM list is the ownership gate's fresh read (fresh-read.ts), not the locator's;
    // CreateVolume's storage status is the pool guard's (rpc/capacity-guard.ts).
    const fresh = (m: keyof ProxmoxApi) =>
      (op === 'DeleteVolume' && m === 'vmResources') || (op === 'CreateVolume' && m === 'storageStatus');
    const refreshes = methods.filter((m) => CACHED.includes(m) && !fresh(m));
    t.same(refreshes, [], `${op}: no cached view read (${methods.join(', ')})`);
    t.equal(methods.length, PROXMOX_CALL_BUDGET[op] + (FAKE_EXTRA[op] ?? 0), `${op}: the budgeted calls`);
  }
});

t.test('in steady use the cached views are refreshed ahead of expiry, never while a request waits', async (t) => {
  const clock = install({ toFake: ['Date'] });
  t.teardown(() => clock.uninstall());
  const { f, setHold, held, release } = heldFake();
  const c = controller(f);
  for (const [, run] of ops(c, 'pvc-warm')) await run();
  const target = [...f.vms.values()].find((v) => v.name === VM)?.vmid;
  let started = 0;
  // Four TTLs in steps of 0.3 TTL: without refresh-ahead every view expires on the way.
  for (let i = 0; i < 14; i++) {
    for (const [op, run] of ops(c, `pvc-${i}`)) {
      clock.tick(TTL * 0.075);
      setHold((m, args) => {
        // Read at decision time by rule (docs/ownership.md), so waited for: the delete's VM list
        // and every VM's entries; the create's pool status (the guard's fill); the publish's other VMs and its own; the unpublish's own VM.
        if (m === 'vmResources') return op !== 'DeleteVolume';
        if (m === 'storageStatus') return op !== 'CreateVolume';
        if (m === 'vmPending') return op === 'ControllerUnpublishVolume' && args[1] !== target;
        return true;
      });
      await answers<unknown>(`${op} at step ${i}`, run());
      started += held();
      setHold(undefined);
      release();
      await new Promise((r) => setImmediate(r));
    }
  }
  t.ok(started >= 8, `the views were re-read in the background meanwhile (${started} reads held past an answer)`);
});

t.test('an unpublish does not re-read the other VMs for its side search of helper leftovers', async (t) => {
  const clock = install({ toFake: ['Date'] });
  t.teardown(() => clock.uninstall());
  const { f, setHold, release } = heldFake();
  const c = controller(f);
  const target = [...f.vms.values()].find((v) => v.name === VM)?.vmid;
  const ids: string[] = [];
  for (const name of ['pvc-a', 'pvc-b']) {
    const id = (await c.createVolume(createReq(name, { parameters: PARAMS }), ctx())).volume?.volumeId ?? '';
    await c.controllerPublishVolume(publishReq(id, VM, PARAMS), ctx());
    ids.push(id);
  }
  const unpublish = (id: string) => c.controllerUnpublishVolume({ volumeId: id, nodeId: VM, secrets: {} }, ctx());
  // The other VMs' entries were read by the publishes; after more than a TTL they are old.
  clock.tick(TTL * 0.6);
  await unpublish(ids[0] ?? '');
  await new Promise((r) => setImmediate(r));
  clock.tick(TTL * 0.6);
  f.resetCalls();
  setHold((m, args) => m !== 'vmPending' || args[1] !== target);
  await answers('the second unpublish', unpublish(ids[1] ?? ''));
  setHold(undefined);
  release();
  t.same(
    f.calls.filter((x) => x.method === 'vmPending' && x.args[1] !== target),
    [],
    'no other VM was read while it waited',
  );
});
