// The HTTP adapter against a small local server that answers like pveproxy: the proxmox-api
// package's real error messages mapped to typed errors, no blind re-send of a POST whose
// connection dropped, no re-send of a read either outside pveproxy's idle-close race
// (get-retry.test.ts), bounded timeouts, and TLS pinned to a CA file.
import t from 'tap';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { isCsiError } from '../../../src/errors.js';
import { createHttpProxmoxApi, endpointOf } from '../../../src/proxmox/api/http-api.js';
import type { ProxmoxClusterConfig } from '../../../src/config/types.js';
import { listenLocal } from '../../helpers/local-server.js';
import { selfSigned } from '../../helpers/self-signed.js';

const TOKEN = { tokenId: 'kubernetes-csi@pve!csi', tokenSecret: '12345678-1234-1234-1234-1234567890ab' };
const JSON_CT = 'application/json;charset=UTF-8';

type Handler = (req: http.IncomingMessage, res: http.ServerResponse, body: string) => void;

function reply(res: http.ServerResponse, status: number, reason: string, body: unknown): void {
  res.writeHead(status, reason, { 'content-type': JSON_CT });
  res.end(JSON.stringify(body));
}

async function serve(
  t: { teardown(fn: () => unknown): void },
  handler: Handler,
  tls?: { key: string; cert: string },
): Promise<string> {
  const onReq = (req: http.IncomingMessage, res: http.ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => handler(req, res, body));
  };
  const server = tls ? https.createServer(tls, onReq) : http.createServer(onReq);
  const port = await listenLocal(t, server);
  return `${tls ? 'https' : 'http'}://127.0.0.1:${port}/api2/json`;
}

function cluster(url: string, extra: Partial<ProxmoxClusterConfig> = {}): ProxmoxClusterConfig {
  return { url, insecure: false, region: 'homelab', ...TOKEN, ...extra };
}

async function failure(p: Promise<unknown>): Promise<{ kind: string; message: string }> {
  try {
    await p;
  } catch (e) {
    return { kind: isCsiError(e) ? e.kind : 'untyped', message: (e as Error).message };
  }
  return { kind: 'none', message: '' };
}

t.test('endpoint parsing', async (t) => {
  t.same(endpointOf('https://pve.example:8006/api2/json', 'r'), { host: 'pve.example', port: 8006, schema: 'https' });
  t.same(
    endpointOf('https://pve.example/', 'r'),
    { host: 'pve.example', port: 443, schema: 'https' },
    'no port means 443, passed explicitly',
  );
  t.throws(() => endpointOf('pve.example:8006', 'r'), /https/);
  t.throws(() => endpointOf('https://pve.example:8006/proxy/api', 'r'), /not supported/);
});

t.test('token shape is checked with a clear message', async (t) => {
  t.throws(
    () => createHttpProxmoxApi({ cluster: cluster('https://127.0.0.1:8006', { tokenSecret: 'ABC' }) }),
    /token_secret/,
  );
  t.throws(
    () => createHttpProxmoxApi({ cluster: cluster('https://127.0.0.1:8006', { tokenId: 'nope' }) }),
    /USER@REALM!TOKENID/,
  );
});

/** Routes pveproxy refuses, as it does: status, reason line (the message), parameter errors. */
const REFUSALS: Partial<Record<string, [number, string, Record<string, string>?]>> = {
  'POST /api2/json/nodes/hyper1/qemu/102/config': [
    400,
    'Parameter verification failed.',
    { scsi1: 'invalid format - format error\n' },
  ],
  'GET /api2/json/nodes/hyper1/qemu/103/config': [
    500,
    "Configuration file 'nodes/hyper1/qemu-server/103.conf' does not exist",
  ],
  'GET /api2/json/nodes/hyper1/qemu/104/config': [403, 'Permission check failed (/vms/104, VM.Audit)'],
  'GET /api2/json/nodes/hyper1/qemu/105/config': [401, 'authentication failure'],
  'GET /api2/json/nodes/hyper1/qemu/106/config': [500, 'cluster not ready - no quorum?'],
  'POST /api2/json/nodes/hyper1/storage/local-lvm/content': [
    500,
    'lvcreate \'pve/vm-9999-pvc-a\' error:   Logical Volume "vm-9999-pvc-a" already exists in volume group "pve"',
  ],
};

t.test('answers and errors', async (t) => {
  const hits = new Map<string, number>();
  const url = await serve(t, (req, res, body) => {
    const key = `${req.method} ${req.url?.split('?')[0]}`;
    hits.set(key, (hits.get(key) ?? 0) + 1);
    t.equal(req.headers.authorization, `PVEAPIToken=${TOKEN.tokenId}=${TOKEN.tokenSecret}`, 'token header');
    const refusal = REFUSALS[key];
    if (refusal) {
      const [code, reason, errors] = refusal;
      reply(res, code, reason, { data: null, ...(errors && { errors }) });
      return;
    }
    switch (key) {
      case 'GET /api2/json/version': {
        reply(res, 200, 'OK', { data: { version: '8.2.4', release: '8.2' } });
        return;
      }
      case 'GET /api2/json/cluster/resources': {
        reply(res, 200, 'OK', {
          data: [
            {
              id: 'qemu/101',
              type: 'qemu',
              vmid: 101,
              name: 'talos-cp-1',
              node: 'hyper1',
              status: 'running',
              template: 0,
            },
            { id: 'lxc/200', type: 'lxc', vmid: 200, name: 'ct', node: 'hyper1' },
            {
              id: 'storage/hyper1/local-lvm',
              type: 'storage',
              storage: 'local-lvm',
              node: 'hyper1',
              content: 'images,rootdir',
              shared: 0,
              status: 'available',
              disk: 5,
              maxdisk: 10,
            },
          ],
        });
        return;
      }
      case 'POST /api2/json/nodes/hyper1/qemu/101/config':
        t.match(body, /scsi1=local-lvm%3Avm-9999-pvc-a/, 'form-encoded body');
        {
          reply(res, 500, "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout", { data: null });
          return;
        }
      case 'PUT /api2/json/nodes/hyper1/qemu/107/unlink':
        req.socket.destroy();
        return;
      case 'GET /api2/json/nodes/hyper1/qemu/108/pending':
        // The connection drops after the start of an answer: not the idle-close race, whichever socket.
        if ((hits.get(key) ?? 0) === 1) {
          req.socket.write('HTTP/1.1 200 OK\r\n');
          return void setTimeout(() => req.socket.destroy(), 50);
        }
        {
          reply(res, 200, 'OK', {
            data: [
              { key: 'scsi1', value: 'local-lvm:vm-9999-pvc-a', delete: 1 },
              { key: 'scsi2', pending: 'local-lvm:vm-9999-pvc-b' },
            ],
          });
          return;
        }
      case 'GET /api2/json/nodes/hyper1/qemu/109/config':
        return void setTimeout(() => reply(res, 200, 'OK', { data: {} }), 1500);
      default: {
        reply(res, 501, `Method '${key}' not implemented`, { data: null });
        return;
      }
    }
  });
  const api = createHttpProxmoxApi({ cluster: cluster(url), queryTimeoutMs: 500 });
  t.teardown(() => api.close());

  t.same(await api.version(), { version: '8.2.4', release: '8.2' });
  const vms = await api.vmResources();
  t.same(
    vms.map((v) => [v.type, v.vmid, v.template]),
    [
      ['qemu', 101, false],
      ['lxc', 200, false],
    ],
    'only guests, template as boolean',
  );
  t.same(
    (await api.storageResources()).map((s) => [s.storage, s.node, s.shared, s.maxdisk]),
    [['local-lvm', 'hyper1', false, 10]],
  );

  let f = await failure(
    api.updateVmConfig('hyper1', 101, { set: { scsi1: 'local-lvm:vm-9999-pvc-a,wwn=0x5056432d49443031' } }),
  );
  t.equal(f.kind, 'Aborted', 'lock timeout is Busy');
  t.match(f.message, /homelab.*can't lock file/);
  t.equal(hits.get('POST /api2/json/nodes/hyper1/qemu/101/config'), 1, 'an HTTP error is not re-sent');

  f = await failure(api.updateVmConfig('hyper1', 102, { set: { scsi1: 'x' } }));
  t.equal(f.kind, 'InvalidArgument');
  t.match(f.message, /scsi1: invalid format/, 'parameter errors are named');

  f = await failure(api.vmConfig('hyper1', 103));
  t.equal(f.kind, 'NotFound', 'missing VM config');

  f = await failure(api.vmConfig('hyper1', 104));
  t.equal(f.kind, 'FailedPrecondition');
  t.match(
    f.message,
    /lacks VM\.Audit on \/vms\/104.*VM\.Config\.Disk Datastore\.Allocate/,
    '403 names the missing privilege and the role',
  );

  f = await failure(api.vmConfig('hyper1', 105));
  t.equal(f.kind, 'FailedPrecondition');
  t.match(f.message, /authentication failed.*kubernetes-csi@pve!csi/);

  f = await failure(api.vmConfig('hyper1', 106));
  t.equal(f.kind, 'Unavailable', 'other 5xx are Unavailable');

  f = await failure(
    api.allocDisk('hyper1', 'local-lvm', { vmid: 9999, filename: 'vm-9999-pvc-a', sizeBytes: 2 ** 30 }),
  );
  t.equal(f.kind, 'AlreadyExists');

  f = await failure(api.unlinkDisks('hyper1', 107, ['scsi1']));
  t.equal(f.kind, 'Unavailable', 'dropped connection');
  t.match(f.message, /cannot reach the API/);
  t.equal(
    hits.get('PUT /api2/json/nodes/hyper1/qemu/107/unlink'),
    1,
    'a mutating call whose connection dropped is NOT re-sent',
  );

  f = await failure(api.vmPending('hyper1', 108));
  t.equal(f.kind, 'Unavailable', 'a read whose connection dropped mid-answer fails');
  t.equal(hits.get('GET /api2/json/nodes/hyper1/qemu/108/pending'), 1, 'and is not sent again');
  const pending = await api.vmPending('hyper1', 108);
  t.same(pending, [
    { key: 'scsi1', value: 'local-lvm:vm-9999-pvc-a', pending: undefined, pendingDelete: true },
    { key: 'scsi2', value: undefined, pending: 'local-lvm:vm-9999-pvc-b', pendingDelete: false },
  ]);

  const started = Date.now();
  f = await failure(api.vmConfig('hyper1', 109));
  t.equal(f.kind, 'Unavailable');
  t.match(f.message, /timed out after 500 ms/);
  t.ok(Date.now() - started < 900, 'bounded by the query timeout');

  const ac = new AbortController();
  const p = api.vmConfig('hyper1', 109, { signal: ac.signal });
  setTimeout(() => ac.abort(), 50);
  f = await failure(p);
  t.equal(f.kind, 'DeadlineExceeded', 'the caller cancelling ends the call');

  f = await failure(api.taskStatus('hyper1', 'UPID:hyper1:1:2:3:qmconfig:101:root@pam:'));
  t.equal(f.kind, 'Unimplemented');
});

t.test('connection refused', async (t) => {
  const probe = http.createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as AddressInfo).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const api = createHttpProxmoxApi({ cluster: cluster(`http://127.0.0.1:${port}/api2/json`), queryTimeoutMs: 2000 });
  t.teardown(() => api.close());
  const f = await failure(api.version());
  t.equal(f.kind, 'Unavailable');
  t.match(f.message, /ECONNREFUSED/);
});

t.test('TLS: pinned CA, unknown CA, insecure', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pve-tls-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const { key, cert, certPath } = selfSigned(dir, 'server', { keyType: 'rsa' });
  const url = await serve(t, (_req, res) => reply(res, 200, 'OK', { data: { version: '8.2.4' } }), {
    key,
    cert,
  });

  const pinned = createHttpProxmoxApi({ cluster: cluster(url, { caFile: certPath }) });
  const unpinned = createHttpProxmoxApi({ cluster: cluster(url) });
  const insecure = createHttpProxmoxApi({ cluster: cluster(url, { insecure: true }) });
  t.teardown(() => Promise.all([pinned.close(), unpinned.close(), insecure.close()]));

  t.equal((await pinned.version()).version, '8.2.4', 'verified against ca_file');
  const f = await failure(unpinned.version());
  t.equal(f.kind, 'Unavailable');
  t.match(f.message, /ca_file/, 'the message says how to fix it');
  t.equal((await insecure.version()).version, '8.2.4', 'insecure: true skips verification');
  t.throws(
    () => createHttpProxmoxApi({ cluster: cluster(url, { caFile: path.join(dir, 'missing.pem') }) }),
    /cannot read ca_file/,
  );
});
