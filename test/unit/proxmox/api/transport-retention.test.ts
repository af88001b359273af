// A finished Proxmox request must leave nothing of its caller behind. The transport's query
// timeout was AbortSignal.timeout(30 s): a timer that cannot be disarmed and that holds the async
// context it was made in, where the transport keeps the caller's cancellation signal (and through
// it, in the server, the whole gRPC call). Every call of the last 30 s stayed in the heap
// (bench/rss.ts: the live heap grew under load; heap snapshots showed the calls retained from
// AbortSignal's timer registry). The transport's own timer is now cleared when the exchange ends.
import t from 'tap';
import http from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { createTransport } from '../../../../src/proxmox/api/transport.js';
import { listenLocal } from '../../../helpers/local-server.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const server = http.createServer((_req, res) => {
  res.setHeader('content-type', 'application/json;charset=UTF-8');
  res.end('{"data":{"version":"9.0"}}');
});
const port = await listenLocal(t, server);
const transport = createTransport({ queryTimeoutMs: 3_600_000, connections: 1, insecure: true });
t.teardown(() => transport.close());

/** One request under a caller's signal; returns a WeakRef to what the caller's call holds. */
async function oneRequest(): Promise<WeakRef<object>> {
  const caller = { signal: new AbortController().signal, request: Buffer.alloc(64 * 1024) };
  const ref = new WeakRef(caller);
  const res = await transport.withSignal(caller.signal, async () => {
    // the caller's call is reachable from its signal, as a gRPC call is from its cancellation
    caller.signal.addEventListener('abort', () => caller.request.fill(0));
    return transport.fetch(`http://127.0.0.1:${port}/api2/json/version`);
  });
  t.equal(res.status, 200);
  await res.text();
  return ref;
}

t.test('a finished request with an hour-long query timeout does not keep its caller alive', async (t) => {
  // The first request opens the pooled connection, whose socket keeps the async context it was
  // made in for as long as it lives (bounded by the pool); the second reuses it.
  await oneRequest();
  const ref = await oneRequest();
  for (let i = 0; i < 3 && ref.deref(); i++) {
    await new Promise((r) => setImmediate(r));
    gc();
  }
  t.equal(ref.deref(), undefined, 'the caller was collected');
});
