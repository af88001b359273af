// docs/install.md, the new-install guide, as written: its helm lines run (install as `helm
// template`: no cluster in this tier) with its my-values.yaml, and its kubectl lines and
// manifests are held to what that render and the driver's contract say (the tiers have no
// kubectl): one namespace throughout, the topology label keys the node plugin reads, the region
// the config names, classes the chart renders for both drivers, a preflight Pod `helm test` runs.
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { parse, parseAllDocuments } from 'yaml';
import { TOPOLOGY_REGION_KEY, TOPOLOGY_ZONE_KEY } from '../../src/proxmox/contract.js';
import { docBlock, docBlocks } from '../helpers/doc-blocks.js';
import { KUBE_VERSION, ROOT, helmBinary, type K8sObject } from './helm.js';

const DOC = path.join(ROOT, 'docs/install.md');
const blocks = docBlocks(DOC);
const block = (name: string) => docBlock(blocks, name, DOC);
const version = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const values = parse(block('my-values.yaml')) as {
  proxmox: { config: { clusters: { region: string }[] } };
};

/**
 * The install block under bash, `helm install oci://$REGISTRY/…` rendered from the checkout's
 * chart (what README step 1 pushes there), `helm install` as `helm template`.
 */
function renderInstall(): K8sObject[] {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'install-doc-'));
  try {
    fs.writeFileSync(path.join(dir, 'my-values.yaml'), block('my-values.yaml'));
    const script = [
      'set -euo pipefail',
      'export REGISTRY=registry.example.lan:5000/homelab',
      // The pushed chart is this chart at this version; the test has no registry.
      `helm() { [ "$1" = install ] || exit 9; shift; local a=(); for x in "$@"; do case "$x" in "oci://$REGISTRY/charts/pve-nfs-csi") a+=("$CHART");; *) a+=("$x");; esac; done; "$HELM_BIN" template "\${a[@]}" --kube-version ${KUBE_VERSION} --set image.repository="$REGISTRY/pve-nfs-csi"; }`,
      block('install'),
    ].join('\n');
    const home = path.join(ROOT, '.cache/helm');
    const res = spawnSync('bash', ['-c', script], {
      cwd: dir,
      encoding: 'utf8',
      maxBuffer: 64 << 20,
      env: {
        ...process.env,
        HELM_BIN: helmBinary(),
        CHART: path.join(ROOT, 'charts/pve-nfs-csi'),
        HELM_CACHE_HOME: path.join(home, 'cache'),
        HELM_CONFIG_HOME: path.join(home, 'config'),
        HELM_DATA_HOME: path.join(home, 'data'),
      },
    });
    if (res.status !== 0) throw new Error(`docs/install.md install failed (${res.status}): ${res.stderr}`);
    return parseAllDocuments(res.stdout)
      .map((d) => d.toJS() as K8sObject | null)
      .filter((o): o is K8sObject => o !== null);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const objects = renderInstall();
const namespace = /^kubectl create namespace (\S+)$/m.exec(block('namespace'))?.[1];

t.test('one namespace: created, labelled privileged, installed into, tested in', async (t) => {
  t.ok(namespace, 'the guide creates a namespace');
  t.match(block('namespace'), `kubectl label namespace ${namespace} pod-security.kubernetes.io/enforce=privileged`);
  t.match(block('install'), `-n ${namespace} `);
  t.match(block('install'), `--version ${version} `, 'the chart version');
  for (const o of objects.filter((x) => x.metadata.namespace !== undefined))
    t.equal(o.metadata.namespace, namespace, `${o.kind}/${o.metadata.name}`);
  const node = objects.find((o) => o.kind === 'DaemonSet');
  const spec = (node?.spec as { template: { spec: { containers: { securityContext?: { privileged?: boolean } }[] } } })
    .template.spec;
  t.ok(
    spec.containers.some((c) => c.securityContext?.privileged),
    'the node plugin is privileged: the label is needed',
  );
});

t.test('the topology labels are the keys the node plugin reads, the region the config names', async (t) => {
  const line = block('topology').trim();
  const labels = Object.fromEntries([...line.matchAll(/(\S+)=(\S+)/g)].map((m) => [m[1] ?? '', m[2] ?? '']));
  t.same(Object.keys(labels).sort(), [TOPOLOGY_REGION_KEY, TOPOLOGY_ZONE_KEY].sort());
  t.equal(labels[TOPOLOGY_REGION_KEY], values.proxmox.config.clusters[0]?.region, 'region = the config cluster region');
  const ctl = objects.find((o) => o.kind === 'Deployment');
  const args =
    (
      ctl?.spec as { template: { spec: { containers: { name: string; args?: string[] }[] } } }
    ).template.spec.containers.find((c) => c.name === 'pve-nfs-csi')?.args ?? [];
  t.equal(
    args[args.indexOf('--node-topology-labels') + 1],
    'on',
    "the guide's values leave the controller setting them",
  );
});

t.test('the test claims use classes the chart renders, one per driver', async (t) => {
  const manifests = parseAllDocuments(block('test-pvc.yaml')).map((d) => d.toJS() as K8sObject);
  const claims = manifests.filter((m) => m.kind === 'PersistentVolumeClaim');
  const provisioners = claims.map((c) => {
    const name = (c.spec as { storageClassName: string }).storageClassName;
    const sc = objects.find((o) => o.kind === 'StorageClass' && o.metadata.name === name);
    t.ok(sc, `StorageClass ${name} is rendered`);
    return (sc as { provisioner?: string } | undefined)?.provisioner;
  });
  t.same(provisioners.sort(), ['csi.proxmox.sinextra.dev', 'nfs.csi.k8s.io']);
  const pod = manifests.find((m) => m.kind === 'Pod');
  const spec = pod?.spec as { volumes?: { persistentVolumeClaim: { claimName: string } }[] } | undefined;
  const used = (spec?.volumes ?? []).map((v) => v.persistentVolumeClaim.claimName);
  t.same(used.sort(), claims.map((c) => c.metadata.name).sort(), 'the pod mounts both claims');
  const podName = pod?.metadata.name ?? '';
  t.match(block('test-pvc'), `kubectl wait --for=condition=Ready pod/${podName} `);
  t.match(block('test-pvc'), 'kubectl apply -f test-pvc.yaml');
});

t.test('verification: helm test runs the chart preflight Pod, whose logs the guide reads', async (t) => {
  const pod = objects.find((o) => o.kind === 'Pod' && o.metadata.annotations?.['helm.sh/hook'] === 'test');
  t.ok(pod, 'a Pod with the helm test hook');
  t.match(block('preflight'), `helm test pve-nfs-csi -n ${namespace}`);
  t.match(block('preflight'), `kubectl -n ${namespace} logs ${pod?.metadata.name ?? '?'}`);
  const args = (pod?.spec as { containers: { args?: string[] }[] }).containers[0]?.args ?? [];
  t.ok(args.includes('preflight'), 'it runs `pve-nfs-csi preflight`');
});

t.test('the VM controller line names a controller the driver supports', async (t) => {
  t.match(block('scsi'), /^qm set \d+ --scsihw (virtio-scsi-single|virtio-scsi-pci) --hotplug \S*disk\S*$/m);
});
