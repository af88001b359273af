// README's Install, as written: the lines of its marked blocks (test/helpers/doc-blocks.ts) run
// under bash, with `helm install` turned into `helm template` (no cluster in this tier) and
// my-values.yaml written from the README's own block. The image the checkout install names must
// be the one step 1 pushes, and the inline Proxmox config must work without blanking
// existingConfigSecret. The registry half (build, push, install from oci://) runs in the release
// tier: test/release/readme-install.test.ts.
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { parseAllDocuments, parse } from 'yaml';
import { docBlock, docBlocks } from '../helpers/doc-blocks.js';
import { KUBE_VERSION, ROOT, container, helmBinary, podSpec, type K8sObject } from './helm.js';

const README = path.join(ROOT, 'README.md');
const blocks = docBlocks(README);
const block = (name: string) => docBlock(blocks, name, README);
const version = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

/** Runs a README command block with `helm install` as `helm template`; returns the objects rendered. */
function runInstall(commands: string): { objects: K8sObject[]; env: Record<string, string> } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'readme-install-'));
  try {
    fs.writeFileSync(path.join(dir, 'my-values.yaml'), block('my-values.yaml'));
    fs.symlinkSync(path.join(ROOT, 'charts'), path.join(dir, 'charts'));
    const exports = block('build')
      .split('\n')
      .filter((l) => l.startsWith('export '))
      .join('\n');
    const script = [
      'set -euo pipefail',
      `helm() { [ "$1" = install ] || { echo "README runs helm $1" >&2; exit 9; }; shift; "$HELM_BIN" template "$@" --kube-version ${KUBE_VERSION}; }`,
      exports,
      commands,
      'echo "---"; echo "# REGISTRY=$REGISTRY"',
    ].join('\n');
    const home = path.join(ROOT, '.cache/helm');
    const res = spawnSync('bash', ['-c', script], {
      cwd: dir,
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
      env: {
        ...process.env,
        HELM_BIN: helmBinary(),
        HELM_CACHE_HOME: path.join(home, 'cache'),
        HELM_CONFIG_HOME: path.join(home, 'config'),
        HELM_DATA_HOME: path.join(home, 'data'),
      },
    });
    if (res.status !== 0) throw new Error(`README commands failed (${res.status}): ${res.stderr}`);
    const registry = /^# REGISTRY=(.*)$/m.exec(res.stdout)?.[1] ?? '';
    const objects = parseAllDocuments(res.stdout)
      .map((d) => d.toJS() as K8sObject | null)
      .filter((o): o is K8sObject => o !== null);
    return { objects, env: { REGISTRY: registry } };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

t.test('the README says no release is published before it shows any registry', async (t) => {
  const install = installSection();
  const first = install.search(/No release is published yet/);
  t.ok(first >= 0, 'the Install section says no release is published');
  t.ok(first < install.indexOf('ghcr.io'), 'before the first ghcr.io name');
});

t.test('the versions in the install commands are the chart version', async (t) => {
  t.match(block('install-oci'), new RegExp(`--version ${version.replace(/\./g, '\\.')}(\\s|$)`));
  t.match(installSection(), new RegExp(`\\$REGISTRY/pve-nfs-csi:${version.replace(/\./g, '\\.')}`));
});

t.test('install from the checkout: the pushed image, the inline config, both classes', async (t) => {
  const { objects, env } = runInstall(block('install-checkout'));
  t.not(env.REGISTRY, '', 'step 1 exports REGISTRY');
  const get = (kind: string, name?: string) => {
    const o = objects.find((x) => x.kind === kind && (name === undefined || x.metadata.name === name));
    if (!o) throw new Error(`no ${kind} ${name ?? ''} rendered`);
    return o;
  };
  const image = `${env.REGISTRY}/pve-nfs-csi:${version}`;
  t.equal(container(podSpec(get('Deployment')), 'pve-nfs-csi').image, image, 'the controller runs the pushed image');
  t.equal(container(podSpec(get('DaemonSet')), 'pve-nfs-csi').image, image, 'the node plugin runs it too');
  for (const o of objects.filter((x) => x.metadata.namespace !== undefined))
    t.equal(o.metadata.namespace, 'csi-proxmox', `${o.kind}/${o.metadata.name} in the README's namespace`);
  const secret = get('Secret', 'pve-nfs-csi-proxmox-config');
  const config = parse((secret.stringData as Record<string, string>)['config.yaml'] ?? '') as {
    clusters: { region: string }[];
  };
  t.equal(config.clusters[0]?.region, 'homelab', 'the inline config is rendered, existingConfigSecret untouched');
  const mounted = (podSpec(get('Deployment')).volumes ?? []).find((v) => v.name === 'proxmox-config');
  t.equal(mounted?.secret?.secretName, 'pve-nfs-csi-proxmox-config');
  t.ok(get('StorageClass', 'proxmox-local'), 'the chart default Proxmox class');
  t.ok(get('StorageClass', 'syno-nfs-csi'), 'the NFS class from my-values.yaml');
});

function installSection(): string {
  const text = fs.readFileSync(README, 'utf8');
  const start = text.indexOf('\n## Install\n');
  return text.slice(start, text.indexOf('\n## ', start + 1));
}
