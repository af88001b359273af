// README's "Published releases" names exactly what the release workflow pushes: the workflow's
// REGISTRY (ghcr.io/<owner>) through scripts/release.sh's naming (image <registry>/pve-nfs-csi:X.Y.Z,
// chart oci://<registry>/charts/pve-nfs-csi) and the GitHub release's assets. The owner is the
// one Chart.yaml's home names. A change to the workflow, the script or the README alone fails here.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { present } from '../../helpers/present.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const read = (f: string) => fs.readFileSync(path.join(ROOT, f), 'utf8');

const workflow = YAML.parse(read('.github/workflows/release.yml')) as {
  on: { push: { tags: string[] } };
  env: Record<string, string>;
};
const chart = YAML.parse(read('charts/pve-nfs-csi/Chart.yaml')) as {
  home?: string;
  sources?: string[];
  maintainers?: { name: string }[];
};
const readme = read('README.md');
const published = present(
  /^Published releases:[\s\S]*?\n\n/m.exec(readme)?.[0],
  'a "Published releases:" paragraph in README.md',
).replace(/\s+/g, ' ');

t.test('Chart.yaml names its home, sources and maintainers', async (t) => {
  t.match(chart.home, /^https:\/\/github\.com\/[\w.-]+\/[\w.-]+$/);
  t.ok(chart.sources?.includes(present(chart.home, 'home')), 'sources include the home repository');
  t.ok((chart.maintainers ?? []).length > 0 && chart.maintainers?.every((m) => m.name !== ''), 'maintainers');
});

t.test("the README's registry lines are what the release workflow pushes", async (t) => {
  const owner = present(/github\.com\/([\w.-]+)\//.exec(chart.home ?? '')?.[1], 'the owner in Chart.yaml home');
  t.equal(workflow.env.REGISTRY, 'ghcr.io/${{ github.repository_owner }}', 'the workflow pushes to ghcr.io/<owner>');
  const registry = `ghcr.io/${owner}`;
  const script = read('scripts/release.sh');
  t.match(script, /repo="\$\{registry:-[^}]*\}\/pve-nfs-csi"/, 'release.sh: the image is <registry>/pve-nfs-csi');
  t.match(script, /buildah push .*"docker:\/\/\$repo:\$version"/, 'release.sh: tagged with the version');
  t.match(script, /"\$HELM" push .*"oci:\/\/\$\{registry\}\/charts"/, 'release.sh: the chart under <registry>/charts');
  t.ok(published.includes(`\`${registry}/pve-nfs-csi:X.Y.Z\``), `README names the image ${registry}/pve-nfs-csi:X.Y.Z`);
  t.ok(published.includes(`\`oci://${registry}/charts/pve-nfs-csi\``), 'README names the chart');
  t.ok(
    read('.github/workflows/release.yml').includes(
      '"dist/release/pve-nfs-csi-${version}.tgz" dist/release/sbom.spdx.json',
    ),
    'the GitHub release carries the chart .tgz and the SBOM',
  );
  t.match(published, /GitHub release with the chart `\.tgz` and the SBOM/);
  t.same(workflow.on.push.tags, ['v*.*.*'], 'published on a pushed tag vX.Y.Z');
  t.match(published, /each pushed tag `vX\.Y\.Z`/);
});

t.test('"from which version on" is a version with a CHANGELOG entry, not yet older than the workflow', async (t) => {
  const from = present(/from `v(\d+\.\d+\.\d+)` on/.exec(published)?.[1], 'a "from `vX.Y.Z` on" in the paragraph');
  t.match(read('CHANGELOG.md'), new RegExp(`^## \\[${from.replace(/\./g, '\\.')}\\]`, 'm'));
  // 0.1.0 was cut before the release workflow existed and was never published.
  t.not(from, '0.1.0');
});
