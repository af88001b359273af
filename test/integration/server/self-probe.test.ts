// /healthz of the metrics listener: CSI Probe over every socket the process serves; 503 naming
// the driver whose socket does not answer, is not ready, or hangs.
import t from 'tap';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { startDriverServer } from '../../../src/server/driver-server.js';
import { Metrics } from '../../../src/server/metrics.js';
import { selfProbe } from '../../../src/server/self-probe.js';
import type { Driver } from '../../../src/csi/types.js';

const silent = pino({ level: 'silent' });

function driver(name: string, probe: () => Promise<boolean>): Driver {
  return {
    name,
    accessibilityConstraints: false,
    onlineExpansion: false,
    probe,
    controller: {
      capabilities: [],
      createVolume: async () => ({ volume: { volumeId: 'v', capacityBytes: 0 } }),
      deleteVolume: async () => ({}),
      validateVolumeCapabilities: async () => ({}),
    },
  };
}

function get(port: number): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/healthz' }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

t.test('/healthz probes each driver socket', async (t) => {
  let nfsReady: boolean | 'hang' = true;
  const a = await startDriverServer({
    driver: driver('a.csi.example', async () => true),
    mode: 'controller',
    endpoint: 'tcp://127.0.0.1:0',
    log: silent,
    version: 't',
  });
  const b = await startDriverServer({
    driver: driver('b.csi.example', () =>
      nfsReady === 'hang' ? new Promise<boolean>(() => undefined) : Promise.resolve(nfsReady),
    ),
    mode: 'controller',
    endpoint: 'tcp://127.0.0.1:0',
    log: silent,
    version: 't',
    probeTimeoutMs: 200,
  });
  t.teardown(() => Promise.all([a.stop(100), b.stop(100)]));
  const metrics = new Metrics(false);
  const server = await metrics.serve('127.0.0.1:0');
  t.teardown(() => server.close());
  const port = (server.address() as AddressInfo).port;

  t.equal((await get(port)).status, 200, 'before the sockets exist the listener says it is alive');
  const self = selfProbe(
    new Map([
      [a.driver, a.endpoint],
      [b.driver, b.endpoint],
    ]),
    2000,
  );
  t.teardown(() => self.close());
  metrics.health = () => self.check();

  t.same(await get(port), { status: 200, body: 'a.csi.example: ready\nb.csi.example: ready\n' });
  nfsReady = false;
  const notReady = await get(port);
  t.equal(notReady.status, 503, 'one driver not ready fails the whole container');
  t.match(notReady.body, /b\.csi\.example: not ready/);
  nfsReady = 'hang';
  const hung = await get(port);
  t.equal(hung.status, 503, "a hung backend: the server's own Probe bound answers not ready");
  nfsReady = true;
  await b.stop(100);
  const gone = await get(port);
  t.equal(gone.status, 503, 'a socket that no longer answers fails');
  t.match(gone.body, /^a\.csi\.example: ready\nb\.csi\.example: .+/);
});
