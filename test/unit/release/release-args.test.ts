// scripts/release.sh refuses a version that is not package.json's, or not a semantic version,
// before it builds anything (the one source of the version is package.json).
import t from 'tap';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const release = (...args: string[]) =>
  spawnSync('bash', [path.join(ROOT, 'scripts/release.sh'), ...args], { encoding: 'utf8', timeout: 60_000 });

t.test('a --version other than package.json is refused, naming both', async (t) => {
  const r = release('--version', '99.0.0');
  t.equal(r.status, 1);
  t.match(r.stderr, /--version 99\.0\.0 but .*package\.json says \d+\.\d+\.\d+: bump package\.json, Chart\.yaml/);
});

t.test('a version that is not semantic is refused', async (t) => {
  const r = release('--version', 'v1.2');
  t.equal(r.status, 1);
  t.match(r.stderr, /not a semantic version/);
});

t.test('an unknown argument is refused', async (t) => {
  const r = release('--tag', 'x');
  t.equal(r.status, 2);
  t.match(r.stderr, /unknown argument --tag/);
});
