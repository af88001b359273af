// The controller's Node topology labels (src/proxmox/controller/node-topology.ts) against a
// stand-in kube-apiserver over real HTTPS (the in-cluster client's GET and merge PATCH, a
// service-account token and CA file) and VM locators that say where each VM runs: labels set on
// an unlabelled Node, changed after its VM migrates, left alone when right, when placed by hand
// or when no cluster has the VM; a refused patch skips only that Node.
import t from 'tap';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { apiServerAt } from '../../../../src/k8s/in-cluster.js';
import {
  syncNodeTopology,
  topologyPatch,
  type LocateVm,
  type NodeTopologyDeps,
} from '../../../../src/proxmox/controller/node-topology.js';
import type { VmRef } from '../../../../src/proxmox/controller/state/vm-locator.js';
import { selfSigned } from '../../../helpers/self-signed.js';
import { tempDir } from '../../../helpers/temp-dir.js';
import type { Teardown } from '../../../helpers/teardown.js';

const REGION = 'topology.kubernetes.io/region';
const ZONE = 'topology.kubernetes.io/zone';

interface FakeNode {
  metadata: { name: string; uid?: string; labels?: Record<string, string> };
  spec?: { providerID?: string };
}

/** A kube-apiserver stand-in: GET /api/v1/nodes, PATCH /api/v1/nodes/NAME (merge patch of labels). */
async function fakeApiServer(t: Teardown, nodes: FakeNode[], refuse = new Set<string>()) {
  const dir = tempDir(t, 'node-topology-');
  const cert = selfSigned(dir, 'apiserver');
  fs.writeFileSync(path.join(dir, 'token'), 'sa-token\n');
  const patches: { name: string; body: unknown; contentType: string | undefined }[] = [];
  const events: { namespace: string; body: Record<string, unknown> }[] = [];
  const server = https.createServer({ key: cert.key, cert: cert.cert }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.headers.authorization !== 'Bearer sa-token') return void res.writeHead(401).end();
      const reply = (status: number, body: unknown) =>
        res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
      if (req.method === 'GET' && req.url === '/api/v1/nodes') return reply(200, { items: nodes });
      const ev = /^\/api\/v1\/namespaces\/([^/]+)\/events$/.exec(req.url ?? '');
      if (req.method === 'POST' && ev) {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
        events.push({ namespace: ev[1] ?? '', body });
        return reply(201, body);
      }
      const m = /^\/api\/v1\/nodes\/([^/]+)$/.exec(req.url ?? '');
      const node = m && nodes.find((n) => n.metadata.name === decodeURIComponent(m[1] ?? ''));
      if (req.method === 'PATCH' && node) {
        if (refuse.has(node.metadata.name)) return reply(403, { message: 'forbidden' });
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          metadata: { labels: Record<string, string> };
        };
        patches.push({ name: node.metadata.name, body, contentType: req.headers['content-type'] });
        node.metadata.labels = { ...node.metadata.labels, ...body.metadata.labels };
        return reply(200, node);
      }
      reply(404, {});
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const kube = apiServerAt({
    host: '127.0.0.1',
    port: (server.address() as AddressInfo).port,
    tokenPath: path.join(dir, 'token'),
    caPath: cert.certPath,
    timeoutMs: 5_000,
  });
  return { kube, patches, events };
}

/** A locator over a VM table: by `proxmox://<region>/<vmid>` or by VM name. */
function locator(region: string, vms: VmRef[]): LocateVm {
  return async (id) => {
    const p = /^proxmox:\/\/([^/]*)\/(\d+)$/.exec(id);
    if (p) return p[1] === region ? vms.find((v) => v.vmid === Number(p[2])) : undefined;
    return vms.find((v) => v.name === id);
  };
}

const log = pino({ level: 'silent' });

t.test('unlabelled Nodes get the region and the host of their VM; right ones are not patched', async (t) => {
  const nodes: FakeNode[] = [
    { metadata: { name: 'talos-w1' } },
    { metadata: { name: 'talos-w2', labels: { [REGION]: 'homelab', [ZONE]: 'pve2' } } },
  ];
  const { kube, patches, events } = await fakeApiServer(t, nodes);
  const vms: VmRef[] = [
    { vmid: 101, node: 'pve1', name: 'talos-w1' },
    { vmid: 102, node: 'pve2', name: 'talos-w2' },
  ];
  const deps: NodeTopologyDeps = { kube, clusters: new Map([['homelab', locator('homelab', vms)]]), log };
  const r = await syncNodeTopology(deps);
  t.same([...r.labelled.keys()], ['talos-w1']);
  t.equal(events.length, 0, 'a first labelling is no move: no Event');
  t.same(patches, [
    {
      name: 'talos-w1',
      body: { metadata: { labels: { [REGION]: 'homelab', [ZONE]: 'pve1' } } },
      contentType: 'application/merge-patch+json',
    },
  ]);
  t.same(nodes[0]?.metadata.labels, { [REGION]: 'homelab', [ZONE]: 'pve1' });

  const again = await syncNodeTopology(deps);
  t.equal(again.labelled.size, 0, 'a second pass changes nothing');
  t.equal(patches.length, 1);
});

t.test('after a migration the zone follows the VM, and a Warning Event on the Node says so', async (t) => {
  const nodes: FakeNode[] = [
    { metadata: { name: 'talos-w1', uid: 'u-1', labels: { [REGION]: 'homelab', [ZONE]: 'pve1' } } },
  ];
  const { kube, patches, events } = await fakeApiServer(t, nodes);
  const vms: VmRef[] = [{ vmid: 101, node: 'pve1', name: 'talos-w1' }];
  const deps: NodeTopologyDeps = { kube, clusters: new Map([['homelab', locator('homelab', vms)]]), log };
  t.equal((await syncNodeTopology(deps)).labelled.size, 0);
  vms[0] = { vmid: 101, node: 'pve3', name: 'talos-w1' };
  const r = await syncNodeTopology(deps);
  t.same(r.labelled.get('talos-w1'), { [ZONE]: 'pve3' }, 'only the zone changes');
  t.equal(nodes[0]?.metadata.labels?.[ZONE], 'pve3');
  t.equal(patches.length, 1);
  t.equal(events.length, 1, 'one Event');
  t.equal(events[0]?.namespace, 'default');
  t.match(events[0]?.body, {
    involvedObject: { kind: 'Node', name: 'talos-w1', uid: 'u-1' },
    reason: 'VMMovedAwayFromZone',
    type: 'Warning',
    message: /now runs on Proxmox host pve3 \(was pve1\).*on pve1 stay there/,
  });
});

t.test('the providerID names the VM before the Node name does; the region is the cluster that has it', async (t) => {
  const nodes: FakeNode[] = [{ metadata: { name: 'worker-a' }, spec: { providerID: 'proxmox://lab2/205' } }];
  const { kube } = await fakeApiServer(t, nodes);
  const clusters = new Map([
    ['homelab', locator('homelab', [{ vmid: 205, node: 'pve1', name: 'worker-a' }])],
    ['lab2', locator('lab2', [{ vmid: 205, node: 'hyper9', name: 'other-name' }])],
  ]);
  const r = await syncNodeTopology({ kube, clusters, log });
  t.same(r.labelled.get('worker-a'), { [REGION]: 'lab2', [ZONE]: 'hyper9' });
});

t.test('hand-placed Nodes, Nodes without a VM and refused patches are left; the others still labelled', async (t) => {
  const nodes: FakeNode[] = [
    { metadata: { name: 'pinned', labels: { 'topology.proxmox.sinextra.dev/node': 'pve1' } } },
    { metadata: { name: 'bare-metal' } },
    { metadata: { name: 'refused' } },
    { metadata: { name: 'talos-w4' } },
  ];
  const { kube, patches } = await fakeApiServer(t, nodes, new Set(['refused']));
  const vms: VmRef[] = [
    { vmid: 1, node: 'pve2', name: 'pinned' },
    { vmid: 3, node: 'pve1', name: 'refused' },
    { vmid: 4, node: 'pve1', name: 'talos-w4' },
  ];
  const r = await syncNodeTopology({ kube, clusters: new Map([['homelab', locator('homelab', vms)]]), log });
  t.same(r.unplaced, ['bare-metal']);
  t.same([...r.labelled.keys()], ['talos-w4']);
  t.same(
    patches.map((p) => p.name),
    ['talos-w4'],
  );
  t.same(nodes[0]?.metadata.labels, { 'topology.proxmox.sinextra.dev/node': 'pve1' }, 'pinned: untouched');
});

t.test('a Node list the API refuses is an error naming the permission', async (t) => {
  const { kube } = await fakeApiServer(t, []);
  const bad = { ...kube, get: () => Promise.resolve({ status: 403, text: 'forbidden' }) };
  await t.rejects(syncNodeTopology({ kube: bad, clusters: new Map(), log }), /needs "list" on nodes/);
});

t.test('topologyPatch: only the labels that differ', async (t) => {
  const node = { name: 'n', labels: { [REGION]: 'homelab', [ZONE]: 'pve1' } };
  t.equal(topologyPatch(node, { region: 'homelab', zone: 'pve1' }), undefined);
  t.same(topologyPatch(node, { region: 'homelab', zone: 'pve2' }), { [ZONE]: 'pve2' });
  t.equal(topologyPatch(node, undefined), undefined);
  t.equal(
    topologyPatch(
      { name: 'n', labels: { 'topology.proxmox.sinextra.dev/region': 'x' } },
      { region: 'homelab', zone: 'pve1' },
    ),
    undefined,
  );
});
