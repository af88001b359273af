// An HTTP(S) server of a test on a free port of 127.0.0.1, closed with every connection it still
// has on the test's teardown (a kept-alive connection would otherwise hold the close).
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Teardown } from './teardown.js';

/** Listens on 127.0.0.1 (a free port); returns the port. */
export async function listenLocal(t: Teardown, server: http.Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );
  return (server.address() as AddressInfo).port;
}
