// The Kubernetes port returns whole lists: an answer with metadata.continue is followed to the
// end (a server or proxy may page unasked), and an answer that says items remain without a
// token fails instead of passing for the whole list. Over a small HTTP server that answers like
// a paging kube-apiserver; the real one is in test/k8s/cli/kube-client.test.ts.
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { connectKube } from '../../../src/k8s/client.js';

interface Served {
  url: string;
  requests: string[];
  close(): Promise<void>;
}

/** PersistentVolumes pv-0 … pv-(n-1), `per` an answer, whatever limit the client asks for. */
async function pagingServer(n: number, per: number, o: { dropToken?: boolean } = {}): Promise<Served> {
  const requests: string[] = [];
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    requests.push(url.pathname + url.search);
    if (url.pathname !== '/api/v1/persistentvolumes') {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"kind":"Status","code":404}');
      return;
    }
    const from = Number(url.searchParams.get('continue') ?? '0');
    const items = Array.from({ length: Math.max(0, Math.min(per, n - from)) }, (_, i) => ({
      metadata: { name: `pv-${from + i}` },
    }));
    const next = from + items.length;
    const metadata: Record<string, unknown> = { resourceVersion: '7' };
    if (next < n) {
      if (!o.dropToken) metadata.continue = String(next);
      metadata.remainingItemCount = n - next;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kind: 'PersistentVolumeList', apiVersion: 'v1', metadata, items }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

function kubeconfig(url: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kube-paging-'));
  const file = path.join(dir, 'config');
  fs.writeFileSync(
    file,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'c', cluster: { server: url, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'u', user: { token: 't' } }],
      contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'x',
    }),
  );
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return file;
}

t.test('a paged PV list is read to its end', async (t) => {
  const s = await pagingServer(7, 3);
  t.teardown(() => s.close());
  const pvs = await connectKube({ kubeconfig: kubeconfig(s.url), env: {} }).listPersistentVolumes();
  t.same(
    pvs.map((p) => p.metadata?.name),
    Array.from({ length: 7 }, (_, i) => `pv-${i}`),
    'every page',
  );
  t.equal(s.requests.length, 3, 'three answers');
  t.match(s.requests[1], /continue=3/, 'the token is sent back');
  t.match(s.requests[0], /limit=\d+/, 'the client asks for pages itself');
});

t.test('an answer that says items remain but carries no token fails', async (t) => {
  const s = await pagingServer(7, 3, { dropToken: true });
  t.teardown(() => s.close());
  await t.rejects(connectKube({ kubeconfig: kubeconfig(s.url), env: {} }).listPersistentVolumes(), {
    message: /items remain but gives no continue token/,
  });
});
