// Which VMs an offline expansion may borrow: the cluster's own node VMs by name, from the config
// list or the Kubernetes Nodes (listed in-cluster, verified TLS, cached); stopped ones first.
import t from 'tap';
import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { VmResource } from '../../../src/proxmox/api/api.js';
import { helperCandidates } from '../../../src/proxmox/controller/rpc/expand.js';
import { configuredHelpers, kubernetesNodeNames } from '../../../src/proxmox/controller/safety/expansion-helpers.js';
import { selfSigned } from '../../helpers/self-signed.js';
import { present } from '../../helpers/present.js';

const vm = (vmid: number, name: string, node: string, status: string): VmResource => ({
  type: 'qemu',
  vmid,
  name,
  node,
  status,
});

t.test("only allowed names on the disk's host, never its owner; stopped first", async (t) => {
  const vms = [
    vm(100, 'pfsense', 'hyper1', 'stopped'),
    vm(101, 'talos-cp-1', 'hyper1', 'running'),
    vm(111, 'talos-worker-1', 'hyper1', 'stopped'),
    vm(112, 'talos-worker-2', 'hyper2', 'stopped'),
    vm(9999, 'talos-owner', 'hyper1', 'stopped'),
  ];
  const allowed = new Set(['talos-cp-1', 'talos-worker-1', 'talos-worker-2', 'talos-owner']);
  t.same(
    helperCandidates(vms, 'hyper1', 9999, allowed).map((v) => v.vmid),
    [111, 101],
    'pfsense is not a node: never borrowed',
  );
  t.same(
    helperCandidates(vms, 'hyper1', 9999).map((v) => v.vmid),
    [100, 111, 101],
    'unrestricted (outside Kubernetes, no list)',
  );
  t.same(
    helperCandidates(vms, 'hyper1', 9999, new Set()).map((v) => v.vmid),
    [],
  );
  t.same([...present(await configuredHelpers(['a', 'b'])(), 'the configured names')], ['a', 'b']);
});

t.test('Kubernetes Node names in-cluster: token, CA, cache, clear errors', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'expansion-helpers-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const tls = selfSigned(dir, 'k');
  const tokenPath = path.join(dir, 'token');
  fs.writeFileSync(tokenPath, 'tok\n');
  let calls = 0;
  let status = 200;
  const api = https.createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    calls++;
    t.equal(req.url, '/api/v1/nodes');
    t.equal(req.headers.authorization, 'Bearer tok');
    res.writeHead(status, { 'Content-Type': 'application/json' });
    res.end(
      status === 200
        ? JSON.stringify({ items: [{ metadata: { name: 'talos-cp-1' } }, { metadata: { name: 'talos-worker-1' } }] })
        : '{"reason":"Forbidden"}',
    );
  });
  await new Promise<void>((r) => api.listen(0, '127.0.0.1', r));
  t.teardown(() => api.close());
  const port = (api.address() as AddressInfo).port;
  const env = { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: String(port) };

  t.equal(kubernetesNodeNames({ env: {}, tokenPath }), undefined, 'outside Kubernetes: no source');
  t.equal(
    kubernetesNodeNames({ env, tokenPath: path.join(dir, 'none') }),
    undefined,
    'no service account token: no source',
  );
  const names = present(
    kubernetesNodeNames({ env, tokenPath, caPath: tls.certPath, ttlMs: 60_000 }),
    'the in-cluster Node source',
  );
  t.same([...present(await names(), 'the Node names')].sort(), ['talos-cp-1', 'talos-worker-1']);
  await names();
  t.equal(calls, 1, 'one list serves expansions for a while');
  status = 403;
  const refused = present(kubernetesNodeNames({ env, tokenPath, caPath: tls.certPath }), 'the in-cluster Node source');
  await t.rejects(refused(), { kind: 'Unavailable', message: /HTTP 403.*needs "list" on nodes/ });
});
