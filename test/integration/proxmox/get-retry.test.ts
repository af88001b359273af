// When the HTTP adapter sends a request again: only a GET whose socket was a reused keep-alive
// socket and was reset before any byte of an answer came back. That is the idle-close race with
// pveproxy (it closes a connection after 5 s idle; a request written as it does so meets the
// close and was never read). Everything else surfaces: a reset on a fresh connection, a reset
// after part of an answer, an HTTP error, and any failure of a mutation (never re-sent).
// A local HTTPS server plays pveproxy and closes sockets on cue.
import t from 'tap';
import https from 'node:https';
import type { Socket } from 'node:net';
import { isCsiError } from '../../../src/errors.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { listenLocal } from '../../helpers/local-server.js';
import { selfSigned } from '../../helpers/self-signed.js';
import { tempDir } from '../../helpers/temp-dir.js';
import type { Teardown } from '../../helpers/teardown.js';

const TOKEN = { tokenId: 'kubernetes-csi@pve!csi', tokenSecret: '12345678-1234-1234-1234-1234567890ab' };

/** What the server does with a request: answer, close the socket at once, or close it after a partial answer. */
type Cue = 'answer' | 'reset' | 'partial' | 'error';

interface Seen {
  method: string;
  path: string;
  /** 1 for the first request on its connection. */
  onSocket: number;
}

async function pveproxy(t: Teardown, cue: (s: Seen) => Cue) {
  const dir = tempDir(t, 'get-retry-');
  const { key, cert, certPath } = selfSigned(dir, 'server');
  const perSocket = new WeakMap<Socket, number>();
  const seen: Seen[] = [];
  let connections = 0;
  const server = https.createServer({ key, cert, keepAlive: true }, (req, res) => {
    const n = (perSocket.get(req.socket) ?? 0) + 1;
    perSocket.set(req.socket, n);
    const s: Seen = { method: req.method ?? '', path: (req.url ?? '').split('?')[0] ?? '', onSocket: n };
    seen.push(s);
    req.resume();
    req.on('end', () => {
      switch (cue(s)) {
        case 'reset':
          req.socket.destroy();
          return;
        case 'partial':
          req.socket.write('HTTP/1.1 200 OK\r\n');
          setTimeout(() => req.socket.destroy(), 50);
          return;
        case 'error':
          res.writeHead(500, 'cluster not ready - no quorum?', { 'content-type': 'application/json;charset=UTF-8' });
          res.end('{"data":null}');
          return;
        case 'answer':
          res.writeHead(200, 'OK', { 'content-type': 'application/json;charset=UTF-8' });
          res.end(JSON.stringify({ data: s.method === 'GET' ? { version: '8.2.4', release: '8.2' } : null }));
      }
    });
  });
  server.on('secureConnection', () => connections++);
  const url = `https://127.0.0.1:${await listenLocal(t, server)}/api2/json`;
  const api = createHttpProxmoxApi({
    cluster: { url, insecure: false, caFile: certPath, region: 'homelab', ...TOKEN },
    queryTimeoutMs: 5_000,
    // One connection, so the next call reuses the idle socket (with more, undici may open
    // another while it checks the idle one).
    connections: 1,
  });
  t.teardown(() => api.close());
  return { api, seen, connections: () => connections };
}

async function failure(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    return isCsiError(e) ? e.kind : 'untyped';
  }
  return 'none';
}

const version = (s: Seen) => s.path === '/api2/json/version';

t.test('a GET on a reused socket reset before any answer byte is sent again on a new connection', async (t) => {
  let resets = 0;
  const { api, seen, connections } = await pveproxy(t, (s) =>
    s.onSocket === 2 && resets++ === 0 ? 'reset' : 'answer',
  );
  await api.version();
  t.same(await api.version(), { version: '8.2.4', release: '8.2' }, 'the second call succeeds');
  t.same(
    seen.map((s) => s.onSocket),
    [1, 2, 1],
    'sent on the reused socket, reset there, then sent once more on a new connection',
  );
  t.equal(connections(), 2);
});

t.test('a GET reset on a fresh connection surfaces and is sent once', async (t) => {
  const { api, seen } = await pveproxy(t, (s) => (s.onSocket === 1 ? 'reset' : 'answer'));
  t.equal(await failure(api.version()), 'Unavailable');
  t.equal(seen.filter(version).length, 1, 'not sent again: a fresh connection has no idle-close race');
});

t.test('a GET on a reused socket reset after part of the answer surfaces and is sent once', async (t) => {
  const { api, seen } = await pveproxy(t, (s) => (s.onSocket === 2 ? 'partial' : 'answer'));
  await api.version();
  t.equal(await failure(api.version()), 'Unavailable');
  t.equal(seen.filter(version).length, 2, 'two calls, two requests: the server had begun to answer');
});

t.test('an HTTP error answering a GET surfaces and is sent once', async (t) => {
  const { api, seen } = await pveproxy(t, () => 'error');
  t.equal(await failure(api.vmConfig('hyper1', 101)), 'Unavailable');
  t.equal(seen.length, 1);
});

t.test('a POST on a reused socket reset before any answer byte is never sent again', async (t) => {
  const { api, seen } = await pveproxy(t, (s) => (s.method === 'POST' ? 'reset' : 'answer'));
  await api.version();
  t.equal(
    await failure(api.updateVmConfig('hyper1', 101, { set: { scsi1: 'local-lvm:vm-9999-pvc-a' } })),
    'Unavailable',
  );
  t.same(
    seen.map((s) => `${s.method} ${s.onSocket}`),
    ['GET 1', 'POST 2'],
    'the POST went out once, on the reused socket',
  );
});
