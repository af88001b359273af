// Idle keep-alive connections: pveproxy closes one after 5 s without activity and says nothing
// about it in its answers (sim/http/keep-alive.ts). A client that keeps it longer sends its next
// request onto a socket the server is closing or has closed: ECONNRESET on the first call after
// an idle spell. The client must close its idle sockets first.
import t from 'tap';
import https from 'node:https';
import fs from 'node:fs';
import { startSimulator } from '../../../sim/index.js';
import { PVEPROXY_IDLE_TIMEOUT_MS } from '../../../sim/http/keep-alive.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { clusterOf } from '../../helpers/proxmox-on-sim.js';

const sim = await startSimulator({ backend: 'none', faults: { authFailureDelayMs: 0, taskDurationMs: 0 } });
t.teardown(() => sim.close());
const cluster = clusterOf(sim);

t.test('the simulator answers like pveproxy: Connection: Keep-Alive, no Keep-Alive timeout', async (t) => {
  const headers = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const req = https.get(
      `${sim.url}/version`,
      { ca: fs.readFileSync(sim.caFile), headers: { Authorization: `PVEAPIToken=${sim.tokenId}=${sim.tokenSecret}` } },
      (res) => {
        const socket = res.socket;
        res.resume();
        res.on('end', () => socket.destroy()); // not left for the server's idle timeout
        resolve(res.headers);
      },
    );
    req.on('error', reject);
  });
  t.match(String(headers.connection), /keep-alive/i);
  t.equal(headers['keep-alive'], undefined, 'the idle timeout is not announced');
});

t.test('the client closes an idle connection before pveproxy does, and the next call works', async (t) => {
  const api = createHttpProxmoxApi({ cluster });
  t.teardown(() => api.close());
  await api.version();
  await api.vmResources();
  const before = { ...sim.connections };
  await new Promise((r) => setTimeout(r, PVEPROXY_IDLE_TIMEOUT_MS + 1_000));
  t.equal(sim.connections.closedIdle - before.closedIdle, 0, 'no connection of ours reached the server idle timeout');
  t.ok(sim.connections.closedByClient > before.closedByClient, 'the client closed its idle connection');
  t.ok((await api.vmResources()).length > 0, 'the call after the idle spell succeeds');
});
