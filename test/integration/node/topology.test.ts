import t from 'tap';
import { present } from '../../helpers/present.js';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { inClusterNodeLabels, nodeLabelsFromApi, resolveTopology } from '../../../src/proxmox/node/topology.js';
import { selfSigned } from '../../helpers/self-signed.js';

t.test('labels: Proxmox CCM labels win over the generic ones, flags fill gaps', async (t) => {
  const labels = (l: Record<string, string>) => async () => l;
  t.same(
    await resolveTopology({
      nodeId: 'w1',
      labels: labels({
        'topology.kubernetes.io/region': 'r-generic',
        'topology.kubernetes.io/zone': 'z-generic',
        'topology.proxmox.sinextra.dev/region': 'homelab',
        'topology.proxmox.sinextra.dev/node': 'hyper2',
      }),
    }),
    { region: 'homelab', zone: 'hyper2' },
  );
  t.same(
    await resolveTopology({
      nodeId: 'w1',
      labels: labels({ 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper1' }),
      region: 'x',
      zone: 'y',
    }),
    { region: 'homelab', zone: 'hyper1' },
    'labels before flags inside a cluster',
  );
  t.same(
    await resolveTopology({
      nodeId: 'w1',
      labels: labels({ 'topology.kubernetes.io/region': 'homelab' }),
      zone: 'hyper3',
    }),
    { region: 'homelab', zone: 'hyper3' },
  );
  t.same(
    await resolveTopology({ nodeId: 'w1', region: 'homelab', zone: 'hyper1' }),
    { region: 'homelab', zone: 'hyper1' },
    'outside a cluster: flags',
  );
  await t.rejects(resolveTopology({ nodeId: 'w1', labels: labels({}) }), {
    kind: 'FailedPrecondition',
    message: /topology\.kubernetes\.io\/region and topology\.kubernetes\.io\/zone/,
  });
});

t.test('not in a cluster without KUBERNETES_SERVICE_HOST or a token', async (t) => {
  t.equal(await inClusterNodeLabels({ env: {} }), undefined);
  t.equal(
    await inClusterNodeLabels({ env: { KUBERNETES_SERVICE_HOST: '127.0.0.1' }, tokenPath: '/nonexistent/token' }),
    undefined,
  );
});

const haveOpenssl = (() => {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

t.test(
  'reads the Node from the API over TLS verified against the service-account CA',
  { skip: haveOpenssl ? false : 'openssl is needed to make a test certificate' },
  async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'k8s-api-test-'));
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const server = selfSigned(dir, 'server');
    const stranger = selfSigned(dir, 'stranger');
    const tokenPath = path.join(dir, 'token');
    fs.writeFileSync(tokenPath, 'sa-token-1\n');
    const seen: string[] = [];
    const api = https.createServer({ key: server.key, cert: server.cert }, (req, res) => {
      seen.push(`${req.url} ${req.headers.authorization}`);
      const send = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (req.url === '/api/v1/nodes/talos-w1') {
        send(200, {
          kind: 'Node',
          metadata: {
            name: 'talos-w1',
            labels: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper1' },
          },
        });
        return;
      }
      if (req.url === '/api/v1/nodes/locked') {
        send(403, { kind: 'Status', reason: 'Forbidden' });
        return;
      }
      if (req.url === '/api/v1/nodes/broken') {
        send(500, { kind: 'Status' });
        return;
      }
      send(404, { kind: 'Status', reason: 'NotFound' });
    });
    await new Promise<void>((r) => api.listen(0, '127.0.0.1', r));
    t.teardown(() => new Promise<void>((r) => api.close(() => r())));
    const port = (api.address() as AddressInfo).port;

    const labels = await inClusterNodeLabels({
      env: { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: String(port) },
      tokenPath,
      caPath: server.certPath,
    });
    t.ok(labels, 'in a cluster');
    const read = present(labels, 'the in-cluster label reader');
    t.same(await resolveTopology({ nodeId: 'talos-w1', labels: read }), { region: 'homelab', zone: 'hyper1' });
    t.same(seen, ['/api/v1/nodes/talos-w1 Bearer sa-token-1']);

    fs.writeFileSync(tokenPath, 'sa-token-2\n');
    await read('talos-w1');
    t.equal(seen[1], '/api/v1/nodes/talos-w1 Bearer sa-token-2', 'a rotated token is picked up');

    await t.rejects(read('nobody'), { kind: 'FailedPrecondition', message: /no Node "nobody".*NODE_NAME/ });
    await t.rejects(read('locked'), { kind: 'FailedPrecondition', message: /HTTP 403.*"get" on nodes/ });
    await t.rejects(read('broken'), { kind: 'Unavailable', message: /HTTP 500/ });

    const untrusted = nodeLabelsFromApi({
      host: '127.0.0.1',
      port,
      tokenPath,
      caPath: stranger.certPath,
      timeoutMs: 2000,
    });
    await t.rejects(
      untrusted('talos-w1'),
      { kind: 'Unavailable', message: /certificate/ },
      'a server the CA did not sign is refused',
    );

    const silent = https.createServer({ key: server.key, cert: server.cert }, () => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    t.teardown(() => {
      silent.closeAllConnections();
      return new Promise<void>((r) => silent.close(() => r()));
    });
    const slow = nodeLabelsFromApi({
      host: '127.0.0.1',
      port: (silent.address() as AddressInfo).port,
      tokenPath,
      caPath: server.certPath,
      timeoutMs: 300,
    });
    const started = Date.now();
    await t.rejects(slow('talos-w1'), { kind: 'Unavailable', message: /no answer within 300 ms/ });
    t.ok(Date.now() - started < 2000, 'bounded');
  },
);
