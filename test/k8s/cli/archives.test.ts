// `pve-nfs-csi archives list|prune` against a real kube-apiserver and ganesha: ages from names
// and from directory times, sizes, the dry run listing exactly what --yes removes, archives a PV
// points at kept, live claim directories never touched.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { stamp } from '../../../src/nfs/controller/rpc/policy.js';
import { render, ROOT, SEED_VALUES } from '../../helm/helm.js';
import { startCliEnv } from './env.js';

const env = await startCliEnv();
t.teardown(() => env.stop(t.passing()));
const kube = env.cluster.kube;
const SHARE = env.talos.share;
const { exists, mkdir } = env;
const nfsArgs = [
  '--kubeconfig',
  env.cluster.adminConfig,
  '--nfs-port',
  String(env.nfs.nfsPort),
  '--nfs-mount-port',
  String(env.nfs.mountPort),
];
const archives = (...args: string[]) => env.run(['archives', ...args, ...nfsArgs]);
interface Listed {
  ok: boolean;
  mode: string;
  archives: Array<{
    path: string;
    original: string;
    archivedAt: number;
    timeFrom: string;
    sizeBytes?: number;
    result?: string;
  }>;
}
const json = (out: string) => JSON.parse(out) as Listed;

const old = 'archived-apps/old-20250101T000000Z';
const recent = `archived-apps/recent-${stamp(new Date(Date.now() - 86400e3))}`;
const upstream = 'archived-apps/upstream';
const pinned = 'archived-apps/pinned-20240101T000000Z';

await t.test('setup: an archive-policy class, a live claim, archives of both namings', async (t) => {
  await env.createNfsClass('archive');
  mkdir('apps/data', { db: 10 });
  await env.createPv('pvc-live', {
    accessMode: 'ReadWriteMany',
    storageClassName: 'syno-nfs-csi',
    csi: { driver: 'nfs.csi.k8s.io', volumeHandle: `${env.nfsServer}#${SHARE.slice(1)}#apps/data#pvc-live#archive` },
  });
  mkdir(old, { a: 1000, b: 24 });
  mkdir(recent, { a: 5 });
  mkdir(upstream, { a: 7 });
  mkdir(pinned, { a: 1 });
  // A static PV made to read an old archive: prune must keep it.
  await env.createPv('recover', {
    accessMode: 'ReadOnlyMany',
    storageClassName: '',
    csi: {
      driver: 'nfs.csi.k8s.io',
      volumeHandle: 'recover',
      volumeAttributes: { server: env.nfsServer, share: SHARE, subDir: pinned },
    },
  });
  t.pass();
});

await t.test('list: every archive with its age (from the name, else the directory) and size', async (t) => {
  const r = await archives('list', '--json');
  t.equal(r.code, 0, r.err);
  const byPath = new Map(json(r.out).archives.map((a) => [a.path, a]));
  t.same([...byPath.keys()].sort(), [old, pinned, recent, upstream].sort(), 'the live claim is not an archive');
  t.equal(byPath.get(old)?.archivedAt, Date.UTC(2025, 0, 1));
  t.equal(byPath.get(old)?.timeFrom, 'name');
  t.equal(byPath.get(old)?.sizeBytes, 1024);
  t.equal(byPath.get(old)?.original, 'apps/old');
  t.equal(byPath.get(upstream)?.timeFrom, 'times');
  t.ok(Math.abs((byPath.get(upstream)?.archivedAt ?? 0) - Date.now()) < 120e3, "upstream-named: the directory's time");
  const text = await archives('list');
  t.match(text.out, /archived-apps\/old-20250101T000000Z\s+apps\/old\s+2025-01-01T00:00:00Z/);
  t.match(text.out, /4 archive\(s\)/);
});

await t.test('prune needs --older-than; list takes no --yes', async (t) => {
  t.equal((await archives('prune')).code, 2);
  t.equal((await archives('list', '--yes')).code, 2);
  t.equal((await archives('prune', '--older-than', 'soon')).code, 2);
});

await t.test('prune dry run lists exactly what would go and removes nothing', async (t) => {
  const r = await archives('prune', '--older-than', '90d', '--json');
  t.equal(r.code, 1, 'a dry run with something to remove');
  const listed = json(r.out).archives;
  t.same(
    listed.filter((a) => a.result === undefined).map((a) => a.path),
    [old],
  );
  t.match(listed.find((a) => a.path === pinned)?.result, /kept: PV recover points there/);
  for (const p of [old, recent, upstream, pinned, 'apps/data']) t.ok(exists(p), `${p} still there`);
  const text = await archives('prune', '--older-than', '90d');
  t.match(text.out, /1 archive\(s\), 1\.0 KiB would be removed/);
});

await t.test('prune --yes removes exactly that', async (t) => {
  const r = await archives('prune', '--older-than', '90d', '--yes', '--json');
  t.equal(r.code, 0, r.err);
  t.same(
    json(r.out)
      .archives.filter((a) => a.result === 'removed')
      .map((a) => a.path),
    [old],
  );
  t.notOk(exists(old));
  for (const p of [recent, upstream, pinned, 'apps/data/db']) t.ok(exists(p), `${p} survives`);
  const again = await archives('prune', '--older-than', '90d');
  t.equal(again.code, 0, 'nothing left to prune');
});

await t.test(
  'a short age reaches the upstream-named archive through its directory times; the live claim stays',
  async (t) => {
    await new Promise((r) => setTimeout(r, 2100));
    const r = await archives('prune', '--older-than', '2s', '--yes', '--json');
    t.equal(r.code, 0, r.err);
    t.same(
      json(r.out)
        .archives.filter((a) => a.result === 'removed')
        .map((a) => a.path)
        .sort(),
      [recent, upstream].sort(),
    );
    t.ok(exists(pinned) && exists('apps/data/db'));
    t.notOk(exists('archived-apps/upstream'));
  },
);

await t.test("the chart's CronJob: its ServiceAccount and RBAC suffice, in-cluster, for its own args", async (t) => {
  const rendered = render({
    valuesFiles: [SEED_VALUES],
    set: ['archivePrune.enabled=true', 'archivePrune.olderThan=1s'],
  });
  const cron = rendered.all('CronJob')[0];
  if (!cron) throw new Error('no CronJob rendered');
  const ns = cron.metadata.namespace ?? 'default';
  await kube.req('POST', '/api/v1/namespaces', { metadata: { name: ns } }).catch(() => undefined);
  for (const kind of ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding']) {
    for (const o of rendered.all(kind).filter((x) => x.metadata.name.endsWith('-archive-prune')))
      await kube.apply(o, ns);
  }
  const podSpec = (
    cron.spec as {
      jobTemplate: {
        spec: { template: { spec: { serviceAccountName: string; containers: Array<{ args: string[] }> } } };
      };
    }
  ).jobTemplate.spec.template.spec;
  const sa = podSpec.serviceAccountName;
  const tr = await kube.create<{ status: { token: string } }>(`/api/v1/namespaces/${ns}/serviceaccounts/${sa}/token`, {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'TokenRequest',
    spec: { expirationSeconds: 600 },
  });
  const saDir = path.join(env.dir, 'cron-sa');
  fs.mkdirSync(saDir, { recursive: true });
  fs.writeFileSync(path.join(saDir, 'token'), tr.status.token);
  fs.writeFileSync(path.join(saDir, 'ca.crt'), env.cluster.ca);
  fs.writeFileSync(path.join(saDir, 'namespace'), ns);
  mkdir('archived-apps/cron-20240601T000000Z', { a: 3 });
  // The container's args, plus the test's ganesha ports (the NAS answers on the standard ones).
  const args = [
    ...(podSpec.containers[0]?.args ?? []),
    '--nfs-port',
    String(env.nfs.nfsPort),
    '--nfs-mount-port',
    String(env.nfs.mountPort),
    '--json',
  ];
  t.same(args.slice(0, 4), ['archives', 'prune', '--older-than', '1s']);
  const sandbox = [
    'mount -t tmpfs -o mode=0755 tmpfs /run',
    'mkdir -p /run/secrets/kubernetes.io/serviceaccount',
    'cp -r "$SA_DIR"/. /run/secrets/kubernetes.io/serviceaccount/',
    'exec "$@"',
  ].join(' && ');
  const r = spawnSync(
    'unshare',
    [
      '--mount',
      '--propagation',
      'private',
      '--',
      'sh',
      '-c',
      sandbox,
      'sh',
      process.execPath,
      '--import',
      'tsx',
      path.join(ROOT, 'src/main.ts'),
      ...args,
    ],
    {
      encoding: 'utf8',
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: path.join(env.dir, 'nohome'),
        SA_DIR: saDir,
        KUBERNETES_SERVICE_HOST: '127.0.0.1',
        KUBERNETES_SERVICE_PORT: String(env.cluster.port),
      },
    },
  );
  t.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
  const out = json(r.stdout);
  t.ok(
    out.archives.some((a) => a.path === 'archived-apps/cron-20240601T000000Z' && a.result === 'removed'),
    'pruned as the CronJob would',
  );
  t.ok(
    out.archives.some((a) => a.path === pinned && /kept: PV recover/.test(a.result ?? '')),
    'the pinned archive is kept',
  );
  t.ok(exists('apps/data/db'), 'the live claim stays');
});
