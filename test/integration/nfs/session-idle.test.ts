// docs/design.md#idle-nfs-sessions (integration tier: it opens sockets to a refusing loopback port): an NFS server's session is closed once idle, so a server named once (a stale or
// mistyped handle) keeps no connection and no health entry; one in use is never closed.
import t from 'tap';
import { createNfs3Stores } from '../../../src/nfs/controller/store/nfs3-store.js';
import { freePort } from '../../helpers/free-port.js';

t.test('idle NFS sessions are closed; health lists only servers in use', async (t) => {
  const dead = await freePort();
  const stores = createNfs3Stores({
    timeoutMs: 500,
    nfsPort: dead,
    mountPort: dead,
    privilegedPort: false,
    idleMs: 200,
  });
  t.teardown(() => stores.close());
  const store = stores.open('127.0.0.1', '/volume1/k8s');
  t.same(stores.servers(), ['127.0.0.1']);
  const h = await stores.health(AbortSignal.timeout(2000));
  t.match(h, [{ kind: 'nfs', backend: '127.0.0.1', up: false }], 'a server that refuses is down');
  await t.rejects(store.ensureDir('pvc-x', {}, { signal: AbortSignal.timeout(2000) }), {
    kind: 'Unavailable',
    message: /./,
  });
  await new Promise((r) => setTimeout(r, 120));
  await stores.health(AbortSignal.timeout(2000)); // a health check is not use
  await new Promise((r) => setTimeout(r, 500));
  t.same(stores.servers(), [], 'closed after being idle');
  t.same(await stores.health(AbortSignal.timeout(2000)), [], 'and gone from health');
});
