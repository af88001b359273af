// Install, upgrade and roll back the way a user does, from the registry: `helm install oci://…`
// release N-1 (built from an older commit) into the k8s tier's cluster (real etcd,
// kube-apiserver, kube-controller-manager, the sidecars; pods run from the programs pulled out
// of the pushed images), volumes of both drivers, one attached by the real external-attacher,
// then `helm upgrade` to N and `helm rollback` to N-1. Across each: no VolumeAttachment detaches,
// no Proxmox disk is unplugged or its VM config touched, no PV changes, and every sidecar's
// lease moves once, to the new pod. A CSIDriver immutable-field change is refused before
// anything changes. Without a kubelet the node DaemonSet's pods are not run (only registered, as
// in the k8s tier), so "attached" means the VolumeAttachment and the disk in the VM's config.
import fs from 'node:fs';
import path from 'node:path';
import t, { type Test } from 'tap';
import YAML from 'yaml';
import { present } from '../helpers/present.js';
import type { K8sObject } from '../k8s/lib/chart.js';
import { NODES, NS, startEnv, type Env } from '../k8s/lib/env.js';
import { KubeError } from '../k8s/lib/kube.js';
import type { CSIDriver, Lease, PersistentVolume, VolumeAttachment } from '../k8s/lib/objects.js';
import { Pve, attachmentOf, createPvc, placePod, waitBound } from '../k8s/lib/workload.js';
import { helm, pullProgram, registry, releases, tmpDir } from './lib/release.js';
import { ControllerKubelet } from './lib/rollout.js';

const started = Date.now();
const reg = registry();
const { prev, next } = releases();
const dir = tmpDir('pnc-upgrade-');
const pulledPrev = pullProgram(reg, prev.image, path.join(dir, 'prev'));
const pulledNext = pullProgram(reg, next.image, path.join(dir, 'next'));
t.comment(`pulled ${prev.image} in ${pulledPrev.pullMs} ms, ${next.image} in ${pulledNext.pullMs} ms`);

const RELEASE = 'pve-nfs-csi';
const valuesFile = path.join(dir, 'values.yaml');
let kubeconfig = '';
/** helm on the release's namespace; the commands that fetch a chart get the registry's CA. */
const helmK = (args: string[]) =>
  helm([...args, '--namespace', NS, ...(['install', 'upgrade'].includes(args[0] ?? '') ? ['--ca-file', reg.ca] : [])], {
    dir,
    kubeconfig,
  });
const manifest = (): K8sObject[] =>
  YAML.parseAllDocuments(helm(['get', 'manifest', RELEASE, '--namespace', NS], { dir, kubeconfig }))
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => !!o?.kind);

const env: Env = await startEnv({
  log: (s) => t.comment(s),
  images: { [prev.image]: pulledPrev.cmd, [next.image]: pulledNext.cmd },
  install: async ({ cluster, values }) => {
    kubeconfig = cluster.adminConfig;
    fs.writeFileSync(valuesFile, YAML.stringify(values));
    const t0 = Date.now();
    helmK(['install', RELEASE, prev.chartRef, '--version', prev.version, '--values', valuesFile]);
    t.comment(`helm install ${prev.chartRef} --version ${prev.version}: ${Date.now() - t0} ms`);
    return manifest();
  },
});
const kube = env.kube;
const pve = new Pve(present(env.pve.info.url, 'the simulator URL'), present(env.pve.info.config, 'the config'));
t.teardown(async () => {
  await pve.close();
  await env.stop(t.passing());
  fs.rmSync(dir, { recursive: true, force: true });
  t.comment(`release upgrade test: ${((Date.now() - started) / 1000).toFixed(0)} s`);
});

const deployment = present(
  env.rendered.find((o) => o.kind === 'Deployment'),
  'the Deployment in the release manifest',
).metadata.name;
const kubelet = new ControllerKubelet(env, deployment);
await kubelet.step();
const node = present(
  NODES.find((n) => n.name === 'talos-worker-1'),
  'talos-worker-1',
);
await kube.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'apps' } });
await kube.waitFor('/api/v1/namespaces/apps/serviceaccounts/default', () => true, 'apps/default SA', 30_000);
await createPvc(env, 'disk', 'proxmox-local');
await createPvc(env, 'share', 'syno-nfs-csi');
await placePod(env, 'app', ['disk', 'share'], node.name);
const disk = (await waitBound(env, 'disk')).pv;
await waitBound(env, 'share');
const vaEnd = Date.now() + 60_000;
let va = await attachmentOf(env, disk.metadata.name, node.name);
while (!va?.status?.attached && Date.now() < vaEnd) {
  await new Promise((r) => setTimeout(r, 250));
  va = await attachmentOf(env, disk.metadata.name, node.name);
}
const attachment = present(va, `the VolumeAttachment of ${disk.metadata.name}`);

/** What an upgrade must leave as it was. */
async function state() {
  const pvs = (await kube.list<PersistentVolume>('/api/v1/persistentvolumes'))
    .map((p) => ({ name: p.metadata.name, rv: p.metadata.resourceVersion, spec: p.spec, phase: p.status?.phase }))
    .sort((a, b) => a.name.localeCompare(b.name));
  const vas = (await kube.list<VolumeAttachment>('/apis/storage.k8s.io/v1/volumeattachments')).map((v) => ({
    name: v.metadata.name,
    spec: v.spec,
    attached: v.status?.attached,
    metadata: v.status?.attachmentMetadata,
  }));
  const vm = await pve.vmConfig(node.zone, node.vmid);
  const disks = Object.fromEntries(Object.entries(vm).filter(([k]) => /^scsi\d+$/.test(k)));
  const drivers = (await kube.list<CSIDriver>('/apis/storage.k8s.io/v1/csidrivers')).map((d) => ({
    name: d.metadata.name,
    uid: d.metadata.uid,
    spec: d.spec,
  }));
  const leases = Object.fromEntries(
    (await kube.list<Lease>(`/apis/coordination.k8s.io/v1/namespaces/${NS}/leases`)).map((l) => [
      l.metadata.name,
      { holder: l.spec.holderIdentity ?? '', transitions: l.spec.leaseTransitions ?? 0 },
    ]),
  );
  return { pvs, vas, disks, drivers, leases };
}

const containersOfDeployment = async () =>
  (
    await kube.get<{ spec: { template: { spec: { containers: { name: string; image?: string }[] } } } }>(
      `/apis/apps/v1/namespaces/${NS}/deployments/${deployment}`,
    )
  ).spec.template.spec.containers;
const imageOfDeployment = async () => (await containersOfDeployment()).find((c) => c.name === 'pve-nfs-csi')?.image;

/** Runs `change` (a helm upgrade or rollback), drives the rollout, checks nothing moved but the leader. */
async function across(t: Test, what: string, image: string, change: () => void): Promise<void> {
  const before = await state();
  const oldPods = await kubelet.running();
  t.ok(attachment.status?.attached, 'the disk is attached before');
  const since = (await env.sim.requests()).lastSeq;
  const t0 = Date.now();
  change();
  const helmMs = Date.now() - t0;
  t.equal(await imageOfDeployment(), image, `the Deployment runs ${image}`);
  const samples = await kubelet.rollout([attachment.metadata.name]);
  t.comment(`${what}: helm ${helmMs} ms, rollout ${Date.now() - t0} ms (${samples.samples} samples)`);
  const after = await state();
  t.same(samples.detached, [], 'the VolumeAttachment stayed attached in every sample');
  t.same(after.vas, before.vas, 'VolumeAttachments unchanged (spec, attached, metadata)');
  t.same(after.pvs, before.pvs, 'PVs unchanged (spec, phase, resourceVersion)');
  t.same(after.disks, before.disks, "the VM's disks unchanged (same slots, same volumes)");
  t.same(after.drivers, before.drivers, 'CSIDriver objects kept (same uid and spec)');
  const calls = (await env.sim.requests(since)).entries.filter(
    (e) => e.method !== 'GET' && (e.path.includes(`/qemu/${node.vmid}/`) || e.path.endsWith('/unlink')),
  );
  t.same(
    calls.map((e) => `${e.method} ${e.path}`),
    [],
    `no change to VM ${node.vmid} reached Proxmox (no detach, no re-attach)`,
  );
  const newPods = await kubelet.running();
  t.equal(newPods.length, 1, 'one controller pod');
  t.notOk(
    newPods.some((p) => oldPods.includes(p)),
    `a new pod (${newPods.join(', ')}) replaced ${oldPods.join(', ')}`,
  );
  // A release from before snapshots runs no csi-snapshotter: its leases are left to expire.
  const snapshotter = (await containersOfDeployment()).some((c) => c.name.includes('snapshotter'));
  for (const [lease, b] of Object.entries(before.leases)) {
    if (!snapshotter && lease.startsWith('external-snapshotter-')) {
      t.comment(`${lease}: no csi-snapshotter in this release; the lease expires`);
      continue;
    }
    const a = present(after.leases[lease], `lease ${lease} after`);
    const seen = samples.holders.get(lease) ?? [];
    t.ok(a.holder.startsWith(present(newPods[0], 'the new pod')), `${lease}: held by the new pod`);
    t.equal(a.transitions, b.transitions + 1, `${lease}: the leader moved once (${seen.join(' -> ')})`);
  }
}

t.test(`upgrade ${prev.version} -> ${next.version} (helm upgrade from oci://)`, async (t) => {
  await across(t, 'upgrade', next.image, () =>
    helmK(['upgrade', RELEASE, next.chartRef, '--version', next.version, '--values', valuesFile]),
  );
  const hist = JSON.parse(helmK(['history', RELEASE, '--output', 'json'])) as { revision: number; status: string }[];
  t.same(
    hist.map((h) => h.status),
    ['superseded', 'deployed'],
  );
});

t.test(
  "a CSIDriver's immutable field: the API server refuses it, the chart refuses before changing anything",
  async (t) => {
    const live = await kube.get<CSIDriver>('/apis/storage.k8s.io/v1/csidrivers/nfs.csi.k8s.io');
    // What helm would send: the same object with volumeLifecycleModes changed.
    const err = await kube
      .req('PUT', '/apis/storage.k8s.io/v1/csidrivers/nfs.csi.k8s.io', {
        ...live,
        spec: { ...live.spec, volumeLifecycleModes: ['Persistent', 'Ephemeral'] },
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    t.ok(err instanceof KubeError && err.status === 422, 'the API server answers 422');
    t.match(
      err instanceof KubeError ? JSON.stringify(err.body) : '',
      /spec\.volumeLifecycleModes: Invalid value: .*field is immutable/,
      'the immutable field, as ValidateCSIDriverUpdate says',
    );
    const before = await state();
    const gen = (
      await kube.get<{ metadata: { generation: number } }>(`/apis/apps/v1/namespaces/${NS}/deployments/${deployment}`)
    ).metadata.generation;
    let msg = '';
    try {
      helmK([
        'upgrade',
        RELEASE,
        next.chartRef,
        '--version',
        next.version,
        '--values',
        valuesFile,
        '--set',
        'nfs.enableInlineVolume=true',
      ]);
    } catch (e) {
      msg = String((e as { stderr?: string }).stderr ?? e);
    }
    t.match(msg, /CSIDriver nfs\.csi\.k8s\.io: spec\.volumeLifecycleModes is \["Persistent"\] in the cluster/);
    t.match(msg, /nothing was changed/);
    t.match(msg, /nfs\.enableInlineVolume/, 'names the value to keep');
    t.same(await state(), before, 'nothing changed');
    t.equal(
      (await kube.get<{ metadata: { generation: number } }>(`/apis/apps/v1/namespaces/${NS}/deployments/${deployment}`))
        .metadata.generation,
      gen,
      'the Deployment was not touched',
    );
    const hist = JSON.parse(helmK(['history', RELEASE, '--output', 'json'])) as { status: string }[];
    t.equal(hist.at(-1)?.status, 'deployed', 'no failed revision: the release is as it was');
  },
);

t.test(`rollback to ${prev.version} (helm rollback)`, async (t) => {
  await across(t, 'rollback', prev.image, () => helmK(['rollback', RELEASE, '1']));
  const hist = JSON.parse(helmK(['history', RELEASE, '--output', 'json'])) as { status: string; description: string }[];
  t.equal(hist.at(-1)?.status, 'deployed');
  t.match(hist.at(-1)?.description ?? '', /Rollback to 1/);
});
