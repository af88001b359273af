// A driver served over gRPC on a free loopback port with a client connected to it, for tests of
// the gRPC layer (validation, limits, error mapping) with a driver of their own. The client is
// closed and the server stopped on the test's teardown.
import { pino } from 'pino';
import type { Driver } from '../../src/csi/types.js';
import { startDriverServer, type DriverServerOptions, type RunningServer } from '../../src/server/driver-server.js';
import { csiClient, type CsiClient } from './csi-client.js';
import type { Teardown } from './teardown.js';

export interface ServeOptions extends Partial<Omit<DriverServerOptions, 'driver'>> {
  /** The client's deadline per call (csiClient's default when unset). */
  clientTimeoutMs?: number;
  /** How long teardown lets in-flight calls drain; default 1 s. */
  drainMs?: number;
}

/** Serves `driver` (mode `all`, silent log, version `0` unless told) and connects a client. */
export async function serveDriver(
  t: Teardown,
  driver: Driver,
  o: ServeOptions = {},
): Promise<{ srv: RunningServer; c: CsiClient }> {
  const { clientTimeoutMs, drainMs = 1000, ...server } = o;
  const srv = await startDriverServer({
    mode: 'all',
    endpoint: 'tcp://127.0.0.1:0',
    log: pino({ level: 'silent' }),
    version: '0',
    ...server,
    driver,
  });
  const c = csiClient(srv.endpoint, clientTimeoutMs);
  t.teardown(async () => {
    c.close();
    await srv.stop(drainMs);
  });
  return { srv, c };
}
