// The proxmox-api package's real error messages, produced by driving the installed package (its
// typed client on our transport, and on its own fetch) against a small HTTPS server that answers
// with pveproxy's error shapes: the reason in the status line, `{"data":null,"message":…,
// "errors":{…}}` from an API handler, an empty body without content type for authentication
// failures and for 595/596 from proxying to another node, a bare text body for pveproxy's own
// errors. package-errors.ts must read each of them, and errors.ts must type each one. Also the
// transport's answers as the package reads them: pveproxy gzips answers over 1 KiB for a client
// that takes gzip; small ones inflate inline, large ones off the event loop, both read as text.
import t from 'tap';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { ProxmoxEngine, proxmoxApi } from 'proxmox-api';
import { gzipSync } from 'node:zlib';
import { generateTls } from '../../../sim/tls.js';
import { isCsiError } from '../../../src/errors.js';
import { isTaskFailure, toCsiError } from '../../../src/proxmox/api/errors.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { backgroundTaskExit, parseFailure } from '../../../src/proxmox/api/package-errors.js';
import { createTransport, packageFetch } from '../../../src/proxmox/api/transport.js';

const TOKEN = { tokenID: 'kubernetes-csi@pve!csi', tokenSecret: '12345678-1234-1234-1234-1234567890ab' };
const JSON_CT = 'application/json;charset=UTF-8';

/** How pveproxy answers an API handler's `die`: reason = first line, the whole text in `message`. */
function apiError(res: http.ServerResponse, status: number, text: string, errors?: Record<string, string>): void {
  const body = JSON.stringify({ data: null, message: `${text}\n`, ...(errors && { errors }) });
  res.writeHead(status, text.split('\n')[0], { 'Content-Type': JSON_CT, Connection: 'close' });
  res.end(body);
}

/** pveproxy's answers without a JSON body: PVE::Exception (401), proxy errors (595/596), error(). */
function bare(res: http.ServerResponse, status: number, reason: string, body = ''): void {
  res.writeHead(status, reason, { Connection: 'close', 'Content-Length': String(Buffer.byteLength(body)) });
  res.end(body);
}

const routes: Record<string, (req: http.IncomingMessage, res: http.ServerResponse) => void> = {
  'POST /api2/json/nodes/pve1/qemu/102/config': (_q, res) =>
    apiError(res, 400, 'Parameter verification failed.', {
      scsi1: 'invalid format - format error\nscsi1.file: value does not look like a valid volume id\n',
    }),
  'GET /api2/json/nodes/pve1/qemu/103/config': (_q, res) =>
    apiError(res, 500, "Configuration file 'nodes/pve1/qemu-server/103.conf' does not exist"),
  'POST /api2/json/nodes/pve1/qemu/101/config': (_q, res) =>
    apiError(res, 500, "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout"),
  'POST /api2/json/nodes/pve1/qemu/105/config': (_q, res) =>
    apiError(res, 500, "failed to update VM 105: can't lock file '/var/lock/qemu-server/lock-105.conf' - got timeout"),
  'GET /api2/json/nodes/pve1/qemu/104/config': (_q, res) =>
    apiError(res, 403, 'Permission check failed (/vms/104, VM.Audit)'),
  'GET /api2/json/version': (_q, res) => bare(res, 401, 'invalid token value!'),
  'GET /api2/json/nodes/pve2/qemu/200/config': (_q, res) => bare(res, 596, 'Connection timed out'),
  'GET /api2/json/nodes/pve3/qemu/300/config': (_q, res) => bare(res, 595, 'No route to host'),
  'GET /api2/json/cluster/resources': (_q, res) => bare(res, 500, 'proxy loop detected', 'proxy loop detected'),
  'GET /api2/json/nodes/pve1/storage/local-lvm/status': (_q, res) => {
    res.writeHead(502, 'Bad Gateway', { 'Content-Type': 'text/html', Connection: 'close' });
    res.end('<html><body>502 Bad Gateway</body></html>');
  },
  'PUT /api2/json/nodes/pve1/qemu/107/unlink': (req) => req.socket.destroy(),
  // a reason that itself holds `: {"` (free text from a storage plugin)
  'DELETE /api2/json/nodes/pve1/storage/local-lvm/content/local-lvm%3Avm-9999-pvc-a': (_q, res) =>
    apiError(res, 500, 'zfs error: cannot parse: {"x": 1} - unexpected'),
};

const listing = (n: number) =>
  JSON.stringify({ data: Array.from({ length: n }, (_, i) => ({ vmid: 100 + i, name: `vm-é-${i}` })) });
const bodies = { '/gz/small': listing(40), '/gz/large': listing(40_000), '/plain': listing(40) };
const encodings: Array<string | undefined> = [];
for (const [url, body] of Object.entries(bodies)) {
  routes[`GET ${url}`] = (req, res) => {
    encodings.push(req.headers['accept-encoding']);
    const gz = url !== '/plain' && /gzip/.test(req.headers['accept-encoding'] ?? '');
    res.writeHead(200, 'OK', [
      ['Content-Type', JSON_CT],
      ...(gz ? [['Content-Encoding', 'gzip']] : []),
      ['X-Twice', 'a'],
      ['X-Twice', 'b'],
    ]);
    res.end(gz ? gzipSync(body) : body);
  };
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pve-package-errors-'));
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
const tls = await generateTls(dir, ['127.0.0.1']);
const server = https.createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
  req.resume();
  req.on('end', () => {
    const route = routes[`${req.method ?? ''} ${req.url?.split('?')[0] ?? ''}`];
    if (route) route(req, res);
    else apiError(res, 501, `Method '${req.method ?? ''} ${req.url ?? ''}' not implemented`);
  });
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const port = (server.address() as AddressInfo).port;
t.teardown(
  () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }),
);

const transport = createTransport({
  queryTimeoutMs: 5_000,
  connections: 2,
  insecure: false,
  ca: fs.readFileSync(tls.caFile),
});
t.teardown(() => transport.close());
const pve = proxmoxApi(
  new ProxmoxEngine({ host: '127.0.0.1', port, schema: 'https', ...TOKEN, fetch: packageFetch(transport.fetch) }),
);
const base = `https://127.0.0.1:${port}/api2/json`;

/** What the package threw. */
async function thrown(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (e) {
    if (e instanceof Error) return e;
    throw new Error(`the package threw a non-Error: ${JSON.stringify(e)}`, { cause: e });
  }
  throw new Error('the call succeeded');
}

const ctx = { cluster: 'homelab', what: 'test call', tokenId: TOKEN.tokenID };

t.test('400: reason, and each parameter error', async (t) => {
  const e = await thrown(pve.nodes.$('pve1').qemu.$(102).config.$post({ scsi1: 'x' }));
  t.match(e.message, /^POST \S+\/qemu\/102\/config return Error 400 Parameter verification failed\.: \{"data":null/);
  t.same(parseFailure(e), {
    method: 'POST',
    url: `${base}/nodes/pve1/qemu/102/config`,
    status: 400,
    reason: 'Parameter verification failed.',
    paramErrors: { scsi1: 'invalid format - format error\nscsi1.file: value does not look like a valid volume id' },
    transport: false,
  });
  const err = toCsiError(e, ctx);
  t.equal(err.kind, 'InvalidArgument');
  t.match(err.message, /scsi1: invalid format/);
});

t.test('500 from an API handler: the reason decides the kind', async (t) => {
  const missing = await thrown(pve.nodes.$('pve1').qemu.$(103).config.$get());
  t.match(missing.message, /^GET \S+ return Error 500 Configuration file/);
  t.equal(parseFailure(missing).reason, "Configuration file 'nodes/pve1/qemu-server/103.conf' does not exist");
  t.equal(toCsiError(missing, ctx).kind, 'NotFound');

  const locked = await thrown(pve.nodes.$('pve1').qemu.$(101).config.$post({ delete: 'scsi5' }));
  t.same(
    { status: parseFailure(locked).status, reason: parseFailure(locked).reason },
    { status: 500, reason: "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout" },
  );
  t.equal(toCsiError(locked, ctx).kind, 'Aborted', 'a lock timeout is Busy');
  t.equal(backgroundTaskExit(locked), undefined, 'not a background_delay task failure');
});

t.test('background_delay: the task failure inside a 500 is the task exit status', async (t) => {
  const e = await thrown(pve.nodes.$('pve1').qemu.$(105).config.$post({ delete: 'scsi5', background_delay: 5 }));
  t.equal(backgroundTaskExit(e), "can't lock file '/var/lock/qemu-server/lock-105.conf' - got timeout");

  const api = createHttpProxmoxApi({
    cluster: {
      url: base,
      region: 'homelab',
      insecure: false,
      caFile: tls.caFile,
      tokenId: TOKEN.tokenID,
      tokenSecret: TOKEN.tokenSecret,
    },
  });
  t.teardown(() => api.close());
  const err = await thrown(api.updateVmConfig('pve1', 105, { delete: ['scsi5'], waitSeconds: 5 }));
  t.ok(isCsiError(err, 'Aborted'), 'typed by the exit status');
  t.ok(isTaskFailure(err), 'known to be the task failing (the outcome is not uncertain)');
  t.match(err.message, /task failed: can't lock file/);
});

t.test('403 names the path and the privilege', async (t) => {
  const e = await thrown(pve.nodes.$('pve1').qemu.$(104).config.$get());
  t.match(
    e.message,
    /^GET \S+ connection failed with 403 Permission check failed \(\/vms\/104, VM\.Audit\) return: \{/,
  );
  t.equal(parseFailure(e).status, 403);
  const err = toCsiError(e, ctx);
  t.equal(err.kind, 'FailedPrecondition');
  t.match(err.message, /lacks VM\.Audit on \/vms\/104/);
});

t.test('401 without a body (PVE::Exception): the reason is the status text', async (t) => {
  const e = await thrown(pve.version.$get());
  t.equal(e.message, `GET ${base}/version return Error 401 invalid token value!: {"data":null,"errors":""}`);
  t.same(parseFailure(e), {
    method: 'GET',
    url: `${base}/version`,
    status: 401,
    reason: 'invalid token value!',
    paramErrors: undefined,
    transport: false,
  });
  const err = toCsiError(e, ctx);
  t.equal(err.kind, 'FailedPrecondition');
  t.match(err.message, /authentication failed \(invalid token value!\).*token_secret/);
});

t.test('501 for a path this Proxmox does not have', async (t) => {
  const e = await thrown(pve.nodes.$('pve1').qemu.$(106).pending.$get());
  t.equal(parseFailure(e).reason, "Method 'GET /api2/json/nodes/pve1/qemu/106/pending' not implemented");
  t.equal(toCsiError(e, ctx).kind, 'Unimplemented');
});

t.test('595/596 from pveproxy proxying to another node: empty body, reason in the status line', async (t) => {
  const e596 = await thrown(pve.nodes.$('pve2').qemu.$(200).config.$get());
  t.equal(
    e596.message,
    `GET ${base}/nodes/pve2/qemu/200/config connection failed with 596 Connection timed out return: {"data":null,"errors":""}`,
  );
  t.same(
    { status: parseFailure(e596).status, reason: parseFailure(e596).reason, transport: parseFailure(e596).transport },
    { status: 596, reason: 'Connection timed out', transport: false },
  );
  const err = toCsiError(e596, ctx);
  t.equal(err.kind, 'Unavailable');
  t.match(err.message, /Connection timed out \(HTTP 596\)/);

  const e595 = await thrown(pve.nodes.$('pve3').qemu.$(300).config.$get());
  t.equal(parseFailure(e595).reason, 'No route to host');
  t.equal(toCsiError(e595, ctx).kind, 'Unavailable');
});

t.test("pveproxy's bare text answer (no content type)", async (t) => {
  const e = await thrown(pve.cluster.resources.$get());
  t.equal(
    e.message,
    `GET ${base}/cluster/resources return Error 500 proxy loop detected: {"data":null,"errors":"proxy loop detected"}`,
  );
  t.equal(parseFailure(e).reason, 'proxy loop detected');
  t.equal(toCsiError(e, ctx).kind, 'Unavailable');
});

t.test('something else answering (a reverse proxy page): unexpected content type', async (t) => {
  const e = await thrown(pve.nodes.$('pve1').storage.$('local-lvm').status.$get());
  t.match(e.message, /^GET \S+ unexpected contentType "text\/html" status Line:502 /);
  t.same(parseFailure(e), {
    method: 'GET',
    url: `${base}/nodes/pve1/storage/local-lvm/status`,
    status: 502,
    reason: 'unexpected content type "text/html" (not a Proxmox API answer)',
    transport: false,
  });
  t.equal(toCsiError(e, ctx).kind, 'Unavailable');
});

t.test('a reason holding `: {"` is still split from the JSON body', async (t) => {
  const e = await thrown(pve.nodes.$('pve1').storage.$('local-lvm').content.$('local-lvm%3Avm-9999-pvc-a').$delete());
  t.equal(parseFailure(e).reason, 'zfs error: cannot parse: {"x": 1} - unexpected');
});

t.test('no answer: our transport answers 599 instead of throwing, so the package does not re-send', async (t) => {
  const e = await thrown(pve.nodes.$('pve1').qemu.$(107).unlink.$put({ idlist: 'scsi1' }));
  t.match(e.message, /^PUT \S+ connection failed with 599 no answer from Proxmox: /);
  const f = parseFailure(e);
  t.equal(f.transport, true);
  t.equal(f.status, undefined);
  t.match(f.reason, /other side closed|ECONNRESET|socket/i);
  const err = toCsiError(e, ctx);
  t.equal(err.kind, 'Unavailable');
  t.match(err.message, /cannot reach the API/);
});

t.test("the package's own fetch throwing: FaILED to call … cause by", async (t) => {
  const probe = http.createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const closed = (probe.address() as AddressInfo).port;
  await new Promise<void>((r) => probe.close(() => r()));
  // queryTimeout: the package leaves its abort timer running when fetch throws (60 s by default,
  // which kept this test's process alive a minute after its last assertion).
  const own = proxmoxApi(
    new ProxmoxEngine({ host: '127.0.0.1', port: closed, schema: 'http', queryTimeout: 1_000, ...TOKEN }),
  );
  const e = await thrown(own.version.$get());
  t.match(e.message, new RegExp(`^FaILED to call GET http://127\\.0\\.0\\.1:${closed}/api2/json/version`));
  const f = parseFailure(e);
  t.same({ method: f.method, transport: f.transport }, { method: 'GET', transport: true });
  t.match(f.reason, /ECONNREFUSED|fetch failed|connect/);
  t.equal(toCsiError(e, ctx).kind, 'Unavailable');
});

t.test('the transport: gzip answers read as their text, inline and large; repeated headers joined', async (t) => {
  for (const [url, body] of Object.entries(bodies)) {
    const res = await transport.fetch(`https://127.0.0.1:${port}${url}`);
    t.equal(res.status, 200, url);
    t.equal(res.headers.get('Content-Type'), JSON_CT, `${url}: content type`);
    t.equal(res.headers.get('content-encoding'), null, `${url}: no encoding left once inflated`);
    t.equal(res.headers.get('x-twice'), 'a, b', `${url}: a repeated header`);
    t.equal(await res.text(), body, `${url}: the text`);
    t.same(await res.json(), JSON.parse(body), `${url}: json() of the same bytes`);
  }
  t.same(encodings, ['gzip', 'gzip', 'gzip'], 'the client says it takes gzip');
});
