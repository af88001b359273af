// The layout's rules, read from the import statements of src/ (type-only imports included):
//   - src/server (gRPC transport) imports no backend: nothing under src/proxmox or src/nfs;
//   - src/controller, src/node, src/csi, src/os, src/config (the CSI Controller and Node
//     services, what both share, the OS adapters, the configuration) import no driver either, so
//     the OS adapters know no driver contract;
//   - src/controller and src/node import nothing of each other, and src/csi (identity, the CSI
//     types, what both services share) imports neither;
//   - a driver's node half imports nothing of src/controller, and the rest of a driver nothing
//     of src/node;
//   - only the entry (main.ts, drivers.ts) imports src/server: the services hand their specs to
//     the transport, backends and configuration find what they need (health, endpoints) below it;
//   - the two drivers import nothing of each other, and nothing above them: not the subcommands
//     (src/cli), the metrics collectors (src/metrics) or the entry (main.ts, drivers.ts);
//   - within a driver, the node half (src/<driver>/node) imports from its driver only its own
//     files and src/<driver>/contract.ts, and nothing else of the driver imports the node half:
//     controller and node share only the contract;
//   - the subcommands in THROUGH_INDEX reach a driver only through its public index
//     (src/<driver>/index.ts), never its internals.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const SRC = path.join(ROOT, 'src');
const DRIVERS = ['proxmox', 'nfs'] as const;
/** src-relative path prefixes of the code that imports a driver only through src/<driver>/index.ts. */
const THROUGH_INDEX = ['cli/move/', 'cli/preflight'];

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return p === path.join(SRC, 'gen') ? [] : sources(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}

/** Relative specifiers of static imports, re-exports and dynamic/type imports, comments stripped. */
export function importsOf(code: string): string[] {
  const stripped = code.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
  const out: string[] = [];
  for (const m of stripped.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)['"](\.{1,2}\/[^'"]+)['"]/gm))
    if (m[1]) out.push(m[1]);
  return out;
}

/** src-relative path of every src file each src file imports. */
function graph(): Map<string, string[]> {
  const g = new Map<string, string[]>();
  for (const file of sources(SRC)) {
    const from = path.relative(SRC, file);
    const targets = importsOf(fs.readFileSync(file, 'utf8')).map((spec) =>
      path.relative(SRC, path.resolve(path.dirname(file), spec)).replace(/\.js$/, '.ts'),
    );
    g.set(
      from,
      targets.filter((p) => !p.startsWith('..')),
    );
  }
  return g;
}

const top = (p: string) => p.split(path.sep)[0] ?? '';
const isDriver = (p: string) => (DRIVERS as readonly string[]).includes(top(p));
/** Layers below the drivers: they import no driver. */
const BELOW_DRIVERS = ['server', 'controller', 'node', 'csi', 'os', 'config'];
/** The CSI layer's halves: each imports only itself and src/csi of the other two. */
const SERVICES = ['controller', 'node'];
/** Layers above the drivers: the subcommands and the metrics collectors read the drivers, never the reverse. */
const ABOVE_DRIVERS = ['cli', 'metrics'];
/** The files that compose the program, the only ones outside src/server that may import it. */
const ENTRY = ['main.ts', 'drivers.ts'];
const throughIndex = (p: string) => THROUGH_INDEX.some((prefix) => p.split(path.sep).join('/').startsWith(prefix));

/** Each broken rule as "a.ts → b.ts: why". */
export function violations(g: Map<string, string[]>): string[] {
  const bad: string[] = [];
  for (const [from, targets] of g) {
    for (const to of targets) {
      const say = (why: string) => bad.push(`${from} → ${to}: ${why}`);
      if (BELOW_DRIVERS.includes(top(from)) && isDriver(to)) {
        say(`src/${top(from)} imports no driver`);
        continue;
      }
      if (top(to) === 'server' && top(from) !== 'server' && !ENTRY.includes(from)) {
        say('only src/server and the entry (main.ts, drivers.ts) import src/server');
        continue;
      }
      if (throughIndex(from) && isDriver(to) && to !== path.join(top(to), 'index.ts')) {
        say(`${from} reaches ${top(to)} only through ${path.join(top(to), 'index.ts')}`);
        continue;
      }
      if (
        SERVICES.includes(top(to)) &&
        (top(from) === 'csi' || (SERVICES.includes(top(from)) && top(from) !== top(to)))
      ) {
        say(`src/${top(from)} imports nothing of src/${top(to)}`);
        continue;
      }
      if (isDriver(from) && SERVICES.includes(top(to))) {
        const half = from.startsWith(path.join(top(from), 'node') + path.sep) ? 'node' : 'controller';
        if (half !== top(to)) {
          say(`the ${half} half of ${top(from)} imports nothing of src/${top(to)}`);
          continue;
        }
      }
      if (isDriver(from) && (ABOVE_DRIVERS.includes(top(to)) || ENTRY.includes(to))) {
        say('a driver imports nothing above it (src/cli, src/metrics, the entry)');
        continue;
      }
      if (isDriver(from) && isDriver(to) && top(from) !== top(to)) {
        say('a driver imports nothing of the other driver');
        continue;
      }
      if (!isDriver(from) || top(from) !== top(to)) continue;
      const d = top(from);
      const fromNode = from.startsWith(path.join(d, 'node') + path.sep);
      const toNode = to.startsWith(path.join(d, 'node') + path.sep);
      if (fromNode && !toNode && to !== path.join(d, 'contract.ts'))
        say(`the node half of ${d} imports only its own files and ${d}/contract.ts`);
      if (!fromNode && toNode) say(`only the node half of ${d} imports ${d}/node`);
    }
  }
  return bad;
}

/**
 * The import cycles of a graph: each strongly connected set of two or more files, sorted. A file
 * importing itself (a type-only `import type * as T from './types.js'`) is no cycle.
 */
export function cycles(g: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v) ?? 0);
    stack.push(v);
    onStack.add(v);
    for (const w of g.get(v) ?? []) {
      if (!g.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) ?? 0, index.get(w) ?? 0));
    }
    if (low.get(v) !== index.get(v)) return;
    const set: string[] = [];
    for (let w = stack.pop(); w !== undefined; w = w === v ? undefined : stack.pop()) {
      onStack.delete(w);
      set.push(w);
    }
    if (set.length > 1) out.push(set.sort());
  };
  for (const v of [...g.keys()].sort()) if (!index.has(v)) visit(v);
  return out.sort((a, b) => (a[0] ?? '').localeCompare(b[0] ?? ''));
}

/**
 * The Proxmox controller's sub-folders, highest first: a file imports only its own folder and
 * the folders after it (rpc › copy › attach › safety › params › state; the API port, src/proxmox/api,
 * below them all). controller.ts and core.ts, at the top of the folder, compose and may import any.
 */
const PROXMOX_ORDER = ['rpc', 'copy', 'attach', 'safety', 'params', 'state'];

/** Each import against PROXMOX_ORDER as "a.ts → b.ts". */
export function orderViolations(g: Map<string, string[]>): string[] {
  const base = path.join('proxmox', 'controller') + path.sep;
  const rank = (p: string) => {
    if (!p.startsWith(base)) return -1;
    const parts = p.slice(base.length).split(path.sep);
    return parts.length > 1 ? PROXMOX_ORDER.indexOf(parts[0] ?? '') : -1;
  };
  const bad: string[] = [];
  for (const [from, targets] of g)
    for (const to of targets)
      if (rank(from) >= 0 && rank(to) >= 0 && rank(to) < rank(from)) bad.push(`${from} → ${to}`);
  return bad.sort();
}

const j = (...p: string[]) => path.join(...p);
/**
 * Today's exceptions, named so that none grows and a new one fails: the Proxmox controller's
 * Cluster (state/cluster.ts) still owns the attach queue, the fences and the ownership port, so
 * state imports attach and safety, and the mover VM and the copy VMs import each other.
 */
const KNOWN_CYCLES: string[][] = [
  [
    j('proxmox', 'controller', 'attach', 'attach-checks.ts'),
    j('proxmox', 'controller', 'attach', 'attach-exec.ts'),
    j('proxmox', 'controller', 'attach', 'attach-jobs.ts'),
    j('proxmox', 'controller', 'attach', 'attach-plan.ts'),
    j('proxmox', 'controller', 'attach', 'attach-queue.ts'),
    j('proxmox', 'controller', 'safety', 'copy-vms.ts'),
    j('proxmox', 'controller', 'safety', 'fresh-read.ts'),
    j('proxmox', 'controller', 'safety', 'mover-port.ts'),
    j('proxmox', 'controller', 'safety', 'ownership-day2.ts'),
    j('proxmox', 'controller', 'safety', 'ownership-port.ts'),
    j('proxmox', 'controller', 'safety', 'ownership.ts'),
    j('proxmox', 'controller', 'safety', 'permit.ts'),
    j('proxmox', 'controller', 'state', 'cluster.ts'),
    j('proxmox', 'mover-vm.ts'),
  ],
];
const KNOWN_ORDER_VIOLATIONS: string[] = [
  `${j('proxmox', 'controller', 'state', 'cluster.ts')} → ${j('proxmox', 'controller', 'attach', 'attach-queue.ts')}`,
  `${j('proxmox', 'controller', 'state', 'cluster.ts')} → ${j('proxmox', 'controller', 'safety', 'fences.ts')}`,
  `${j('proxmox', 'controller', 'state', 'cluster.ts')} → ${j('proxmox', 'controller', 'safety', 'ownership-port.ts')}`,
  `${j('proxmox', 'controller', 'state', 'cluster.ts')} → ${j('proxmox', 'controller', 'safety', 'startup-fence.ts')}`,
  `${j('proxmox', 'controller', 'state', 'pool-usage.ts')} → ${j('proxmox', 'controller', 'safety', 'pool-guard.ts')}`,
].sort();

t.test('src/ has no import cycles beyond the named ones', async (t) => {
  t.same(cycles(graph()), KNOWN_CYCLES);
});

t.test("the Proxmox controller's sub-folders import one way", async (t) => {
  t.same(orderViolations(graph()), KNOWN_ORDER_VIOLATIONS);
});

t.test('the cycle and order checks catch what they forbid', async (t) => {
  const g = new Map<string, string[]>([
    ['a.ts', ['b.ts']],
    ['b.ts', ['c.ts', 'x.ts']],
    ['c.ts', ['a.ts']],
    ['d.ts', ['d.ts', 'a.ts']],
    ['e.ts', ['f.ts']],
    ['f.ts', ['e.ts']],
  ]);
  t.same(cycles(g), [
    ['a.ts', 'b.ts', 'c.ts'],
    ['e.ts', 'f.ts'],
  ]);
  const p = (...x: string[]) => j('proxmox', 'controller', ...x);
  t.same(
    orderViolations(
      new Map([
        [p('rpc', 'volumes.ts'), [p('state', 'cluster.ts'), p('rpc', 'list.ts'), p('core.ts')]],
        [p('state', 'scan.ts'), [p('safety', 'fences.ts'), p('state', 'drives.ts'), j('proxmox', 'api', 'api.ts')]],
        [p('attach', 'attach-plan.ts'), [p('copy', 'thin-copy.ts'), p('params', 'params.ts')]],
      ]),
    ),
    [
      `${p('attach', 'attach-plan.ts')} → ${p('copy', 'thin-copy.ts')}`,
      `${p('state', 'scan.ts')} → ${p('safety', 'fences.ts')}`,
    ],
  );
});

t.test('the import graph of src/ keeps the layout', async (t) => {
  const g = graph();
  t.ok(g.size > 50 && [...g.values()].some((ts) => ts.length > 0), 'the walker found the sources and their imports');
  t.ok(g.get('drivers.ts')?.includes(path.join('proxmox', 'node', 'node.ts')), 'it resolves imports to files');
  t.same(
    [
      path.join('controller', 'service.ts'),
      path.join('node', 'service.ts'),
      path.join('csi', 'identity-service.ts'),
    ].filter((f) => !g.has(f)),
    [],
    'the CSI Controller service lives in src/controller, the Node service in src/node, identity in src/csi',
  );
  t.same(violations(g), []);
});

t.test('the rules catch what they forbid', async (t) => {
  const g = new Map<string, string[]>([
    [j('server', 'x.ts'), [j('proxmox', 'contract.ts'), j('controller', 'service.ts')]],
    [j('os', 'scsi.ts'), [j('proxmox', 'contract.ts')]],
    [j('config', 'load.ts'), [j('nfs', 'param-keys.ts'), j('server', 'endpoint.ts'), j('config', 'endpoint.ts')]],
    [j('node', 'service.ts'), [j('server', 'interceptor.ts'), j('controller', 'confirm.ts'), j('csi', 'types.ts')]],
    [j('csi', 'validate.ts'), [j('node', 'common.ts')]],
    [j('controller', 'service.ts'), [j('node', 'paths.ts'), j('nfs', 'contract.ts')]],
    [j('nfs', 'node', 'node.ts'), [j('node', 'call.ts'), j('controller', 'confirm.ts')]],
    [j('nfs', 'controller', 'controller.ts'), [j('controller', 'confirm.ts'), j('node', 'common.ts')]],
    [j('proxmox', 'controller', 'controller.ts'), [j('server', 'health.ts'), j('csi', 'health.ts')]],
    [j('main.ts'), [j('server', 'driver-server.ts')]],
    [j('drivers.ts'), [j('server', 'metrics.ts')]],
    [j('nfs', 'param-keys.ts'), [j('proxmox', 'param-keys.ts')]],
    [j('nfs', 'controller', 'copy', 'copy-progress.ts'), [j('metrics', 'source.ts'), j('csi', 'gauges.ts')]],
    [j('proxmox', 'controller', 'pool-metrics.ts'), [j('cli', 'report', 'findings.ts'), j('drivers.ts')]],
    [
      j('proxmox', 'node', 'stage.ts'),
      [
        j('proxmox', 'controller', 'params.ts'),
        j('proxmox', 'contract.ts'),
        j('proxmox', 'node', 'wwn.ts'),
        j('node', 'common.ts'),
      ],
    ],
    [
      j('proxmox', 'controller', 'core.ts'),
      [j('proxmox', 'node', 'topology.ts'), j('proxmox', 'contract.ts'), j('proxmox', 'volume-id.ts')],
    ],
    [j('cli', 'move', 'plan.ts'), [j('proxmox', 'index.ts'), j('proxmox', 'mover-vm.ts'), j('cli', 'privileges.ts')]],
    [j('cli', 'preflight-checks.ts'), [j('nfs', 'index.ts'), j('nfs', 'client', 'mount.ts')]],
    [j('cli', 'report', 'fix.ts'), [j('proxmox', 'api', 'tasks.ts')]],
  ]);
  t.same(violations(g), [
    `${j('server', 'x.ts')} → ${j('proxmox', 'contract.ts')}: src/server imports no driver`,
    `${j('os', 'scsi.ts')} → ${j('proxmox', 'contract.ts')}: src/os imports no driver`,
    `${j('config', 'load.ts')} → ${j('nfs', 'param-keys.ts')}: src/config imports no driver`,
    `${j('config', 'load.ts')} → ${j('server', 'endpoint.ts')}: only src/server and the entry (main.ts, drivers.ts) import src/server`,
    `${j('node', 'service.ts')} → ${j('server', 'interceptor.ts')}: only src/server and the entry (main.ts, drivers.ts) import src/server`,
    `${j('node', 'service.ts')} → ${j('controller', 'confirm.ts')}: src/node imports nothing of src/controller`,
    `${j('csi', 'validate.ts')} → ${j('node', 'common.ts')}: src/csi imports nothing of src/node`,
    `${j('controller', 'service.ts')} → ${j('node', 'paths.ts')}: src/controller imports nothing of src/node`,
    `${j('controller', 'service.ts')} → ${j('nfs', 'contract.ts')}: src/controller imports no driver`,
    `${j('nfs', 'node', 'node.ts')} → ${j('controller', 'confirm.ts')}: the node half of nfs imports nothing of src/controller`,
    `${j('nfs', 'controller', 'controller.ts')} → ${j('node', 'common.ts')}: the controller half of nfs imports nothing of src/node`,
    `${j('proxmox', 'controller', 'controller.ts')} → ${j('server', 'health.ts')}: only src/server and the entry (main.ts, drivers.ts) import src/server`,
    `${j('nfs', 'param-keys.ts')} → ${j('proxmox', 'param-keys.ts')}: a driver imports nothing of the other driver`,
    `${j('nfs', 'controller', 'copy', 'copy-progress.ts')} → ${j('metrics', 'source.ts')}: a driver imports nothing above it (src/cli, src/metrics, the entry)`,
    `${j('proxmox', 'controller', 'pool-metrics.ts')} → ${j('cli', 'report', 'findings.ts')}: a driver imports nothing above it (src/cli, src/metrics, the entry)`,
    `${j('proxmox', 'controller', 'pool-metrics.ts')} → ${j('drivers.ts')}: a driver imports nothing above it (src/cli, src/metrics, the entry)`,
    `${j('proxmox', 'node', 'stage.ts')} → ${j('proxmox', 'controller', 'params.ts')}: the node half of proxmox imports only its own files and ${j('proxmox', 'contract.ts')}`,
    `${j('proxmox', 'controller', 'core.ts')} → ${j('proxmox', 'node', 'topology.ts')}: only the node half of proxmox imports ${j('proxmox', 'node')}`,
    `${j('cli', 'move', 'plan.ts')} → ${j('proxmox', 'mover-vm.ts')}: ${j('cli', 'move', 'plan.ts')} reaches proxmox only through ${j('proxmox', 'index.ts')}`,
    `${j('cli', 'preflight-checks.ts')} → ${j('nfs', 'client', 'mount.ts')}: ${j('cli', 'preflight-checks.ts')} reaches nfs only through ${j('nfs', 'index.ts')}`,
  ]);
  t.same(
    importsOf(
      `import a from './a.js';\n// import b from './b.js';\nexport { c } from '../c.js';\nimport './side.js';\ntype T = import('./t.js').T;\nimport x from 'node:fs';`,
    ),
    ['./a.js', '../c.js', './side.js', './t.js'],
  );
});

// scripts/ holds build, codegen and environment set-up; the harness and the suites live under
// test/. Tests may import the code generators (to check their output is current), never the
// other way round.
t.test('scripts/ imports nothing of the tests or the benchmarks', async (t) => {
  const dir = path.join(ROOT, 'scripts');
  const files = fs
    .readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => path.join(dir, f));
  t.ok(files.length >= 5, 'the walker found the scripts');
  const bad = files.flatMap((file) =>
    importsOf(fs.readFileSync(file, 'utf8'))
      .map((spec) => path.relative(ROOT, path.resolve(path.dirname(file), spec)))
      .filter((p) => ['test', 'bench'].includes(p.split(path.sep)[0] ?? ''))
      .map((p) => `${path.relative(ROOT, file)} → ${p}`),
  );
  t.same(bad, []);
});
