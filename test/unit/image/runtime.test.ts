// One Node major everywhere: the image's base (Dockerfile FROM), package.json "engines", the
// version the test scripts install (scripts/lib/ensure.sh) and the node running these tests.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { present } from '../../helpers/present.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const read = (f: string) => fs.readFileSync(path.join(ROOT, f), 'utf8');

t.test('Dockerfile, engines, ensure.sh and this process agree on the Node major', async (t) => {
  const froms = [...read('Dockerfile').matchAll(/^FROM\s+node:(\d+)-\S+/gm)].map((m) => m[1]);
  t.ok(froms.length >= 1, 'the Dockerfile is based on an official node image');
  const ensure = /^NODE_VERSION="\$\{NODE_VERSION:-(\d+)\.\d+\.\d+\}"/m.exec(read('scripts/lib/ensure.sh'));
  t.ok(ensure, 'ensure.sh pins NODE_VERSION');
  const major = present(ensure?.[1], 'the NODE_VERSION major in ensure.sh');
  t.same(new Set(froms), new Set([major]), "every FROM uses the tests' major");
  const engines = (JSON.parse(read('package.json')) as { engines: { node: string } }).engines.node;
  t.equal(engines, `>=${major} <${Number(major) + 1}`, 'engines names the same major');
  t.equal(
    process.versions.node.split('.')[0],
    major,
    'the tests run on that major (scripts/lib/ensure.sh puts it on PATH)',
  );
});
