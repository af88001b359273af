// The content view's refresh-ahead and its reads that were in flight across this process's own
// frees, allocations and invalidations: a freed disk never comes back from a read sent before
// the free, an allocated one never drops out of one, an invalidated list is not kept.
import t from 'tap';
import { install } from '@sinonjs/fake-timers';
import type { ProxmoxApi, StorageContentItem } from '../../../../../src/proxmox/api/api.js';
import { ContentCache } from '../../../../../src/proxmox/controller/state/content-cache.js';

const item = (disk: string): StorageContentItem => ({ volid: `local-lvm:${disk}`, size: 1, vmid: 9999, format: 'raw' });

/** listContent answers with `rows` as they are when release() is called (held until then while `hold`). */
function api() {
  const rows: StorageContentItem[] = [];
  let hold = false;
  let waiting: Array<() => void> = [];
  let calls = 0;
  const a = {
    async listContent() {
      calls++;
      if (hold) await new Promise<void>((r) => waiting.push(r));
      return [...rows];
    },
  } as unknown as ProxmoxApi;
  return {
    a,
    rows,
    calls: () => calls,
    hold: (h: boolean) => (hold = h),
    release: async () => {
      const w = waiting;
      waiting = [];
      for (const r of w) r();
      await new Promise((r) => setImmediate(r));
    },
  };
}

t.test('refresh-ahead: past half the TTL the list is served and read again in the background', async (t) => {
  const clock = install({ toFake: ['Date'] });
  t.teardown(() => clock.uninstall());
  const p = api();
  p.rows.push(item('vm-9999-a'));
  const c = new ContentCache(p.a, 1000);
  await c.list('n1', 'local-lvm', 9999);
  clock.tick(400);
  await c.list('n1', 'local-lvm', 9999);
  t.equal(p.calls(), 1, 'young: no read');
  clock.tick(200);
  p.hold(true);
  p.rows.push(item('vm-9999-b'));
  t.same(
    (await c.list('n1', 'local-lvm', 9999)).map((i) => i.volid),
    ['local-lvm:vm-9999-a'],
    'served at once while the read waits',
  );
  await c.list('n1', 'local-lvm', 9999);
  t.equal(p.calls(), 2, 'one background read, not one per caller');
  await p.release();
  p.hold(false);
  clock.tick(700); // 1.3 TTL after the first read, 0.7 after the background one
  t.same(
    (await c.list('n1', 'local-lvm', 9999)).map((i) => i.volid),
    ['local-lvm:vm-9999-a', 'local-lvm:vm-9999-b'],
    'the background read replaced the list before it expired',
  );
  t.equal(c.refreshes, 2, 'and 0.7 TTL later the next one started');
});

t.test('a read sent before a free or an allocation of this process is corrected by it', async (t) => {
  const clock = install({ toFake: ['Date'] });
  t.teardown(() => clock.uninstall());
  const p = api();
  p.rows.push(item('vm-9999-old'));
  const c = new ContentCache(p.a, 1000);
  await c.list('n1', 'local-lvm', 9999);
  clock.tick(600);
  p.hold(true);
  await c.list('n1', 'local-lvm', 9999); // starts the background read; Proxmox answers as of now
  clock.tick(10);
  // Meanwhile this process frees one disk and allocates another (the read does not see either).
  c.removed('n1', 'local-lvm', 'local-lvm:vm-9999-old');
  c.added('n1', 'local-lvm', 9999, item('vm-9999-new'));
  await p.release();
  const now = (await c.list('n1', 'local-lvm', 9999)).map((i) => i.volid);
  t.same(now, ['local-lvm:vm-9999-new'], 'the freed disk did not come back, the new one is there');
  t.equal(c.peek('n1', 'local-lvm', 9999, 'local-lvm:vm-9999-old'), undefined, 'peek agrees');
});

t.test('a list invalidated while a read was in flight is not kept', async (t) => {
  const clock = install({ toFake: ['Date'] });
  t.teardown(() => clock.uninstall());
  const p = api();
  const c = new ContentCache(p.a, 1000);
  await c.list('n1', 'local-lvm', 9999);
  clock.tick(600);
  p.hold(true);
  await c.list('n1', 'local-lvm', 9999);
  c.invalidate('n1', 'local-lvm'); // e.g. a marker was written
  await p.release();
  p.hold(false);
  p.rows.push(item('vm-9999-a.marker'));
  t.same(
    (await c.list('n1', 'local-lvm', 9999)).map((i) => i.volid),
    ['local-lvm:vm-9999-a.marker'],
    'read again after the invalidation',
  );
  t.equal(p.calls(), 3);
});
