// The Kubernetes client library is for subcommands only: serving CSI must not load it (start
// time and memory). Walks the static import graph of src/main.ts (dynamic imports are the lazy
// edges and are not followed) and fails when the library or src/k8s/client.ts is reachable.
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';

const ROOT = path.resolve(import.meta.dirname, '../../..');
const STATIC_RE = /^\s*(?:import|export)\s+(?!type\b)(?:[^'";]*?\sfrom\s+)?['"]([^'"]+)['"]/gm;

function staticGraph(entry: string): Set<string> {
  const seen = new Set<string>();
  const todo = [entry];
  for (let file = todo.pop(); file !== undefined; file = todo.pop()) {
    if (seen.has(file)) continue;
    seen.add(file);
    if (!file.endsWith('.ts')) continue;
    const src = fs.readFileSync(file, 'utf8');
    for (const m of src.matchAll(STATIC_RE)) {
      const spec = m[1] ?? '';
      if (spec.startsWith('.')) todo.push(path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')));
      else todo.push(spec);
    }
  }
  return seen;
}

t.test('src/main.ts does not statically reach @kubernetes/client-node', (t) => {
  const graph = staticGraph(path.join(ROOT, 'src/main.ts'));
  t.ok(graph.has(path.join(ROOT, 'src/cli/index.ts')), 'the walker follows imports (sanity)');
  t.notOk(
    [...graph].some((f) => f.startsWith('@kubernetes/')),
    'no @kubernetes/* package',
  );
  t.notOk(graph.has(path.join(ROOT, 'src/k8s/client.ts')), 'not src/k8s/client.ts');
  t.end();
});

t.test('the walker would notice a static import of the library', (t) => {
  const graph = staticGraph(path.join(ROOT, 'src/k8s/client.ts'));
  t.ok(graph.has('@kubernetes/client-node'));
  t.notOk(
    staticGraph(path.join(ROOT, 'src/k8s/index.ts')).has('@kubernetes/client-node'),
    'index.ts loads it only dynamically',
  );
  t.end();
});
