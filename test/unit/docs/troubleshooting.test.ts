// docs/troubleshooting.md has one section for each thing a user can see, and none for a thing
// that is gone: a `### ` heading under "## gRPC errors" per error kind of src/errors.ts (by its
// gRPC code name, e.g. `FAILED_PRECONDITION`), under "## Alerts" per alert of the chart's
// PrometheusRule template, and under "## Events the driver writes" per Event reason in src/
// (a `reason: 'PascalCase'` property: the Event's field, however the object is built).
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const read = (rel: string) => fs.readFileSync(path.join(ROOT, rel), 'utf8');

/** The `### ` headings under each `## ` heading, by the `## ` heading's text. */
export function sections(doc: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let current: string[] | undefined;
  for (const line of doc.split('\n')) {
    const h2 = /^## (.+)$/.exec(line);
    if (h2) out.set((h2[1] ?? '').trim(), (current = []));
    const h3 = /^### (.+)$/.exec(line);
    if (h3 && current) current.push((h3[1] ?? '').trim());
  }
  return out;
}

/** `InvalidArgument` → `INVALID_ARGUMENT`: the gRPC code name the status table maps a kind to. */
const codeName = (kind: string) => kind.replace(/([a-z])([A-Z])/g, '$1_$2').toUpperCase();

/** The kinds of src/errors.ts (`make('Kind')`) and the code src/server/status.ts maps each to. */
function errorKinds(): string[] {
  const kinds = [...read('src/errors.ts').matchAll(/\bmake\('(\w+)'\)/g)].map((m) => m[1] ?? '');
  const table = read('src/server/status.ts');
  for (const k of kinds)
    if (!new RegExp(`\\b${k}: status\\.${codeName(k)}\\b`).test(table))
      throw new Error(`src/server/status.ts does not map ${k} to ${codeName(k)}`);
  return kinds;
}

const alerts = () =>
  [...read('charts/pve-nfs-csi/templates/prometheusrule.yaml').matchAll(/^\s*- alert: (\w+)\s*$/gm)].map(
    (m) => m[1] ?? '',
  );

function eventReasons(): string[] {
  const files = execFileSync('git', ['ls-files', 'src'], { cwd: ROOT, encoding: 'utf8' })
    .split('\n')
    .filter((f) => f.endsWith('.ts'));
  const found = new Set<string>();
  for (const f of files)
    for (const m of read(f).matchAll(/\breason:\s*['"]([A-Z][A-Za-z]+)['"]/g)) found.add(m[1] ?? '');
  return [...found].sort();
}

const doc = sections(read('docs/troubleshooting.md'));
const under = (h: string) => {
  const list = doc.get(h);
  if (!list) throw new Error(`docs/troubleshooting.md has no "## ${h}" section`);
  return list;
};

/** Both directions: the names without a heading, and the headings that name nothing there is. */
const diff = (headings: string[], names: string[]) => ({
  missing: names.filter((n) => !headings.includes(n)),
  stale: headings.filter((h) => !names.includes(h)),
});

t.test('the heading reader', async (t) => {
  const s = sections('# T\n## A\n### x\ntext\n### `y` (Y)\n## B\n## C\n### z\n');
  t.same(
    [...s.entries()],
    [
      ['A', ['x', '`y` (Y)']],
      ['B', []],
      ['C', ['z']],
    ],
  );
  t.equal(codeName('FailedPrecondition'), 'FAILED_PRECONDITION');
  t.equal(codeName('Internal'), 'INTERNAL');
});

t.test('a section per gRPC error kind', async (t) => {
  const kinds = errorKinds();
  t.ok(kinds.length >= 10, `read ${kinds.length} kinds from src/errors.ts`);
  // `Busy` is the exported name of the Aborted kind; the heading names the code and the export.
  const exported = new Map(
    [...read('src/errors.ts').matchAll(/export const (\w+) = make\('(\w+)'\)/g)].map((m) => [m[2] ?? '', m[1] ?? '']),
  );
  t.same(
    diff(
      under('gRPC errors'),
      kinds.map((k) => `\`${codeName(k)}\` (${exported.get(k) ?? k})`),
    ),
    { missing: [], stale: [] },
    'a section per error kind, none for a kind that is gone',
  );
});

t.test('a section per alert of the PrometheusRule', async (t) => {
  const names = alerts();
  t.ok(names.length >= 10, `read ${names.length} alerts from the chart`);
  t.same(diff(under('Alerts'), names), { missing: [], stale: [] }, 'a section per alert, none for one that is gone');
});

t.test('a section per Event reason the driver writes', async (t) => {
  t.same(
    diff(under('Events the driver writes'), eventReasons()),
    { missing: [], stale: [] },
    'a section per Event reason, none for one that is gone',
  );
});
