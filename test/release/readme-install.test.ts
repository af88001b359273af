// README's Install, the registry half, as written (the checkout half renders in the chart tier:
// test/helm/readme-install.test.ts): step 1's block runs in a copy of this tree with REGISTRY set
// to the tier's TLS registry (its CA exported as the README says), then step 4's `helm install
// oci://…` line renders from that registry (`helm template`: the chart as pulled, no cluster).
// The chart must name the image step 1 pushed, and the registry must hold it at the digest the
// build reported.
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import t from 'tap';
import { parseAllDocuments } from 'yaml';
import { docBlock, docBlocks } from '../helpers/doc-blocks.js';
import { helmBinary } from '../k8s/lib/chart.js';
import { registry, tmpDir } from './lib/release.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const README = path.join(ROOT, 'README.md');
const blocks = docBlocks(README);
const block = (name: string) => docBlock(blocks, name, README);
const reg = registry();
const dir = tmpDir('pnc-readme-');
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
const REGISTRY = `${reg.host}/readme`;

/** The block under bash in `cwd`, REGISTRY pointed at the test registry (the README's export line names yours). */
function run(commands: string, cwd: string, extra: Record<string, string> = {}): string {
  const script = `set -euo pipefail\n${commands.replace(/^export REGISTRY=.*$/m, 'export REGISTRY="$TEST_REGISTRY"')}`;
  const res = spawnSync('bash', ['-c', script], {
    cwd,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
    env: {
      ...process.env,
      TEST_REGISTRY: REGISTRY,
      REGISTRY,
      REGISTRY_CERT_DIR: reg.certDir,
      REGISTRY_CA: reg.ca,
      HELM_CACHE_HOME: path.join(dir, 'helm/cache'),
      HELM_CONFIG_HOME: path.join(dir, 'helm/config'),
      HELM_DATA_HOME: path.join(dir, 'helm/data'),
      ...extra,
    },
  });
  if (res.status !== 0) throw new Error(`README block failed (${res.status}):\n${res.stderr.slice(-4000)}`);
  return res.stdout;
}

t.test('step 1 builds and pushes; step 4 installs from the registry the image step 1 pushed', async (t) => {
  // A checkout as a user has it: the tracked and new files, no node_modules, no dist.
  const tree = path.join(dir, 'checkout');
  fs.mkdirSync(tree);
  execFileSync('bash', ['-c', `git ls-files -z -co --exclude-standard | tar --null -T - -c | tar -x -C "${tree}"`], {
    cwd: ROOT,
  });
  const t0 = Date.now();
  run(block('build'), tree);
  t.comment(`step 1 (npm ci, npm run release) in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  const version = (JSON.parse(fs.readFileSync(path.join(tree, 'package.json'), 'utf8')) as { version: string }).version;
  const env = fs.readFileSync(path.join(tree, 'dist/release', version, 'release.env'), 'utf8');
  const digest = /^DIGEST=(.+)$/m.exec(env)?.[1];
  t.equal(/^IMAGE=(.+)$/m.exec(env)?.[1], `${REGISTRY}/pve-nfs-csi:${version}`, 'pushed where the README says');

  const inspect = execFileSync(
    'skopeo',
    ['inspect', '--cert-dir', reg.certDir, `docker://${REGISTRY}/pve-nfs-csi:${version}`],
    { encoding: 'utf8' },
  );
  t.equal(
    (JSON.parse(inspect) as { Digest: string }).Digest,
    digest,
    'the registry holds the digest the build reported',
  );

  const work = path.join(dir, 'install');
  fs.mkdirSync(work);
  fs.writeFileSync(path.join(work, 'my-values.yaml'), block('my-values.yaml'));
  // Go reads SSL_CERT_FILE: helm trusts the test CA the way it trusts a system CA.
  const out = run(
    `helm() { [ "$1" = install ] || exit 9; shift; "$HELM_BIN" template "$@" --kube-version v1.33.0; }\n${block('install-oci')}`,
    work,
    { HELM_BIN: helmBinary(), SSL_CERT_FILE: reg.ca },
  );
  const images = parseAllDocuments(out)
    .map(
      (d) =>
        d.toJS() as {
          kind?: string;
          spec?: { template?: { spec?: { containers?: { name: string; image: string }[] } } };
        },
    )
    .filter((o) => o.kind === 'Deployment' || o.kind === 'DaemonSet')
    .map((o) => o.spec?.template?.spec?.containers?.find((c) => c.name === 'pve-nfs-csi')?.image);
  t.same(images, [`${REGISTRY}/pve-nfs-csi:${version}`, `${REGISTRY}/pve-nfs-csi:${version}`], 'controller and node');
});
