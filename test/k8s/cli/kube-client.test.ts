// src/k8s against a real kube-apiserver (etcd + kube-apiserver from scripts/k8s-build.sh, no
// controllers): kubeconfig and in-cluster credentials, every call of the port, optimistic
// concurrency (resourceVersion, uid preconditions), 404/403/409 as typed errors, cancellation.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { API_ONLY, binaries, startCluster } from '../lib/cluster.js';
import { annotationsPatch, isConflict, isKubeError, openKube } from '../../../src/k8s/index.js';
import { loadKubeConfig } from '../../../src/k8s/client.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'k8s-client-'));
const cluster = await startCluster(dir, binaries(API_ONLY), { controllerManager: false });
t.teardown(async () => {
  await cluster.stop();
  if (t.passing()) fs.rmSync(dir, { recursive: true, force: true });
});

/** The rejection of p (fails the test when p resolves). */
async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => new Error('resolved, expected a rejection'),
    (e: unknown) => e,
  );
}

const pv = (name: string) => ({
  apiVersion: 'v1',
  kind: 'PersistentVolume',
  metadata: { name },
  spec: {
    capacity: { storage: '1Gi' },
    accessModes: ['ReadWriteOnce'],
    persistentVolumeReclaimPolicy: 'Delete',
    csi: { driver: 'csi.proxmox.sinextra.dev', volumeHandle: `homelab/hyper1/local-lvm/vm-9999-${name}` },
  },
});

t.test('kubeconfig: PVs through their whole life, with preconditions', async (t) => {
  const kube = await openKube({ kubeconfig: cluster.adminConfig, env: {} });
  t.match(kube.describe, cluster.server);
  t.same(await kube.listPersistentVolumes(), []);
  const created = await kube.createPersistentVolume(pv('pvc-a'));
  t.equal(created.metadata?.name, 'pvc-a');
  t.ok(created.metadata?.uid);
  const dup = await rejection(kube.createPersistentVolume(pv('pvc-a')));
  t.ok(isConflict(dup) && isKubeError(dup) && dup.reason === 'AlreadyExists', 'a second create is AlreadyExists');
  const got = await kube.getPersistentVolume('pvc-a');
  t.equal(got?.spec?.csi?.volumeHandle, 'homelab/hyper1/local-lvm/vm-9999-pvc-a');
  t.equal(await kube.getPersistentVolume('nope'), undefined, 'a missing object is undefined');

  const rv = got?.metadata?.resourceVersion ?? '';
  const patched = await kube.patchPersistentVolume('pvc-a', annotationsPatch({ 'example.com/step': 'one' }), {
    resourceVersion: rv,
  });
  t.equal(patched.metadata?.annotations?.['example.com/step'], 'one');
  t.ok(
    isConflict(
      await rejection(
        kube.patchPersistentVolume('pvc-a', annotationsPatch({ 'example.com/step': 'two' }), { resourceVersion: rv }),
      ),
    ),
    'a stale resourceVersion is refused',
  );
  const removed = await kube.patchPersistentVolume('pvc-a', annotationsPatch({ 'example.com/step': null }));
  t.notOk(removed.metadata?.annotations?.['example.com/step'], 'null removes an annotation');
  const dry = await kube.patchPersistentVolume('pvc-a', annotationsPatch({ 'example.com/dry': 'x' }), { dryRun: true });
  t.equal(dry.metadata?.annotations?.['example.com/dry'], 'x');
  t.notOk(
    (await kube.getPersistentVolume('pvc-a'))?.metadata?.annotations?.['example.com/dry'],
    'dry run persists nothing',
  );

  t.ok(isConflict(await rejection(kube.deletePersistentVolume('pvc-a', { uid: 'not-its-uid' }))), 'uid precondition');
  t.equal(await kube.deletePersistentVolume('pvc-a', { uid: created.metadata?.uid ?? '' }), true);
  // pv-protection finalizers are added by an admission plugin; without controllers it may linger.
  const after = await kube.getPersistentVolume('pvc-a');
  if (after) {
    await kube.patchPersistentVolume('pvc-a', { metadata: { finalizers: null } });
  }
  t.equal(await kube.getPersistentVolume('pvc-a'), undefined);
  t.equal(await kube.deletePersistentVolume('pvc-a'), false, 'deleting what is gone resolves false');
});

t.test('kubeconfig: PVCs, Secrets, lists', async (t) => {
  const kube = await openKube({ kubeconfig: cluster.adminConfig, env: {} });
  const pvc = await kube.createPersistentVolumeClaim({
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name: 'data', namespace: 'default' },
    spec: {
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: '1Gi' } },
      storageClassName: 'proxmox-local',
    },
  });
  t.equal(pvc.metadata?.namespace, 'default');
  t.equal((await kube.listPersistentVolumeClaims()).length, 1);
  const p = await kube.patchPersistentVolumeClaim('default', 'data', annotationsPatch({ a: 'b' }));
  t.equal(p.metadata?.annotations?.a, 'b');
  t.equal((await kube.getPersistentVolumeClaim('default', 'data'))?.metadata?.annotations?.a, 'b');
  t.equal(await kube.getPersistentVolumeClaim('default', 'none'), undefined);
  t.equal(await kube.deletePersistentVolumeClaim('default', 'data'), true);
  await cluster.kube.create('/api/v1/namespaces/default/secrets', {
    metadata: { name: 'cfg' },
    stringData: { 'config.yaml': 'clusters: []\n' },
  });
  const s = await kube.getSecret('default', 'cfg');
  t.equal(Buffer.from(s?.data?.['config.yaml'] ?? '', 'base64').toString(), 'clusters: []\n');
  t.equal(await kube.getSecret('default', 'nope'), undefined);
  t.same(await kube.listVolumeAttachments(), []);
  t.same(await kube.listNodes(), []);
  t.same(await kube.listStorageClasses(), []);
  await t.rejects(kube.listPersistentVolumes(AbortSignal.abort()), 'an aborted signal cancels the call');
});

t.test('in-cluster ServiceAccount: RBAC decides, 403 is a typed error', async (t) => {
  await cluster.kube.create('/api/v1/namespaces/default/serviceaccounts', { metadata: { name: 'day2' } });
  const tr = await cluster.kube.create<{ status: { token: string } }>(
    '/api/v1/namespaces/default/serviceaccounts/day2/token',
    { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 3600 } },
  );
  const root = path.join(dir, 'pod');
  const sa = path.join(root, 'var/run/secrets/kubernetes.io/serviceaccount');
  fs.mkdirSync(sa, { recursive: true });
  fs.writeFileSync(path.join(sa, 'token'), tr.status.token);
  fs.writeFileSync(path.join(sa, 'ca.crt'), cluster.ca);
  fs.writeFileSync(path.join(sa, 'namespace'), 'default');
  const env = { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: String(cluster.port), HOME: root };
  const kube = await openKube({ env, serviceAccountRoot: root });
  t.match(kube.describe, /in-cluster/);
  const denied = await rejection(kube.listPersistentVolumes());
  t.ok(isKubeError(denied, 403) && /forbidden/i.test(denied.message), `403 without RBAC: ${String(denied)}`);
  await cluster.kube.create('/apis/rbac.authorization.k8s.io/v1/clusterroles', {
    metadata: { name: 'day2' },
    rules: [{ apiGroups: [''], resources: ['persistentvolumes'], verbs: ['list'] }],
  });
  await cluster.kube.create('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
    metadata: { name: 'day2' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'day2' },
    subjects: [{ kind: 'ServiceAccount', name: 'day2', namespace: 'default' }],
  });
  const end = Date.now() + 10_000;
  for (;;) {
    try {
      t.same(await kube.listPersistentVolumes(), [], 'allowed once bound');
      break;
    } catch (e) {
      if (!isKubeError(e, 403) || Date.now() > end) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
});

t.test('credentials: precedence, contexts, and a clear error when there are none', (t) => {
  const empty = fs.mkdtempSync(path.join(dir, 'home-'));
  t.throws(() => loadKubeConfig({ env: { HOME: empty } }), /no Kubernetes credentials/);
  t.throws(() => loadKubeConfig({ kubeconfig: path.join(empty, 'missing'), env: {} }), /does not exist/);
  t.equal(
    loadKubeConfig({ env: { KUBECONFIG: cluster.adminConfig, HOME: empty } }).from,
    cluster.adminConfig,
    'KUBECONFIG',
  );
  fs.mkdirSync(path.join(empty, '.kube'));
  fs.copyFileSync(cluster.adminConfig, path.join(empty, '.kube', 'config'));
  t.equal(loadKubeConfig({ env: { HOME: empty } }).from, path.join(empty, '.kube', 'config'), '~/.kube/config');
  t.throws(
    () => loadKubeConfig({ kubeconfig: cluster.adminConfig, context: 'other', env: {} }),
    /no context "other" \(known: local\)/,
  );
  t.equal(
    loadKubeConfig({ kubeconfig: cluster.adminConfig, context: 'local', env: {} }).kc.getCurrentContext(),
    'local',
  );
  t.end();
});
