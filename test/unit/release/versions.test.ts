// One version everywhere (semantic versioning; package.json is the source scripts/release.sh
// reads): package.json and its lock, Chart.yaml's version and appVersion, the Dockerfile's
// org.opencontainers.image.version label, `pve-nfs-csi --version`, and a CHANGELOG.md entry.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { present } from '../../helpers/present.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const read = (f: string) => fs.readFileSync(path.join(ROOT, f), 'utf8');
const SEMVER = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$/;

const pkg = JSON.parse(read('package.json')) as { version: string };
const version = pkg.version;

t.test('package.json carries a semantic version, and its lock the same', async (t) => {
  t.match(version, SEMVER);
  const lock = JSON.parse(read('package-lock.json')) as {
    version: string;
    packages: Record<string, { version?: string }>;
  };
  t.equal(lock.version, version, 'package-lock.json version');
  t.equal(lock.packages['']?.version, version, 'package-lock.json packages[""].version');
});

t.test("Chart.yaml's version and appVersion are package.json's", async (t) => {
  const chart = YAML.parse(read('charts/pve-nfs-csi/Chart.yaml')) as { version: unknown; appVersion: unknown };
  t.equal(chart.version, version, 'Chart.yaml version');
  t.equal(chart.appVersion, version, 'Chart.yaml appVersion (a string: quoted)');
});

t.test("the Dockerfile's final stage labels the image with the version", async (t) => {
  const stages = read('Dockerfile').split(/^FROM\s/m);
  const last = present(stages.at(-1), 'the final stage of the Dockerfile');
  const labels = [...last.replace(/\\\n/g, ' ').matchAll(/([\w.-]+)="([^"]*)"/g)].map((m) => [m[1], m[2]]);
  t.same(
    labels.filter(([k]) => k === 'org.opencontainers.image.version').map(([, v]) => v),
    [version],
    'one org.opencontainers.image.version label, equal to package.json',
  );
});

t.test('`pve-nfs-csi --version` prints it', async (t) => {
  const out = execFileSync(process.execPath, ['--import', 'tsx', path.join(ROOT, 'src/main.ts'), '--version'], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  t.equal(out, `${version}\n`);
});

t.test('CHANGELOG.md has an entry for it, and its entries are semantic versions, newest first', async (t) => {
  const heads = [...read('CHANGELOG.md').matchAll(/^## \[?([^\]\s]+)\]?/gm)].map((m) => present(m[1], 'a version'));
  const released = heads.filter((h) => h !== 'Unreleased');
  t.equal(released[0], version, 'the newest entry is the current version');
  for (const h of released) t.match(h, SEMVER, `${h} is a semantic version`);
  const key = (v: string) => {
    const [major = 0, minor = 0, patch = 0] = v.split(/[.-]/).map(Number);
    return major * 1e6 + minor * 1e3 + patch;
  };
  const sorted = [...released].sort((a, b) => key(b) - key(a));
  t.same(released, sorted, 'newest first');
});
