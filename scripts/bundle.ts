// What the image runs: the compiled program (dist/src, tsc's output) and the production
// dependencies it imports, linked by esbuild into ES modules under dist/bundle/. The image then
// needs no node_modules (74 MB, half of it @kubernetes/client-node for the day-2 CLI), and Node
// resolves and reads a few files instead of ~400 at start. Each lazily imported part (a driver's
// half, prom-client, the CLI subcommands with the Kubernetes client) stays its own chunk, loaded
// only when used, as in dist/src. Minified (V8 keeps every script's source in the heap: 2.7 MiB
// less RSS idle) but with the original function and class names, which error names and logs use.
// The licences of every bundled package go beside it in THIRD-PARTY-LICENSES.txt. Last, the V8
// code cache of what each role runs at start (scripts/lib/compile-cache.ts) goes beside it in
// compile-cache/, which image/entrypoint.sh hands to node.
//   npx tsx scripts/bundle.ts      (after `npm run build`; `npm run bundle` does both)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { buildCompileCache } from './lib/compile-cache.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const BUNDLE_DIR = path.join(ROOT, 'dist/bundle');
const ENTRY = path.join(ROOT, 'dist/src/main.js');

if (!fs.existsSync(ENTRY)) throw new Error(`${ENTRY} is missing: npm run build first`);
fs.rmSync(BUNDLE_DIR, { recursive: true, force: true });
const result = await build({
  entryPoints: { main: ENTRY },
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node24',
  outdir: BUNDLE_DIR,
  metafile: true,
  minify: true,
  keepNames: true,
  logLevel: 'warning',
  legalComments: 'none', // collected as whole licence files below
  // The CommonJS dependencies require Node's built-ins; in an ES module only a made require can.
  banner: {
    js: "import { createRequire as __bundleRequire } from 'node:module';\nconst require = __bundleRequire(import.meta.url);",
  },
});

// One licence file per bundled package (name@version and its LICENSE/NOTICE files).
const packages = new Map<string, string>();
for (const input of Object.keys(result.metafile.inputs)) {
  const m = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input);
  if (m?.[1]) packages.set(m[1], m[1]);
}
const notices: string[] = [];
for (const dir of [...packages.keys()].sort()) {
  const abs = path.join(ROOT, dir);
  const pkg = JSON.parse(fs.readFileSync(path.join(abs, 'package.json'), 'utf8')) as {
    name: string;
    version: string;
    license?: string;
  };
  const files = fs.readdirSync(abs).filter((f) => /^(licen[cs]e|notice|copying)/i.test(f));
  const texts = files.map((f) => fs.readFileSync(path.join(abs, f), 'utf8').trim());
  notices.push(
    `${pkg.name}@${pkg.version} (${pkg.license ?? 'see below'})\n\n${texts.join('\n\n') || '(no licence file in the package)'}`,
  );
}
fs.writeFileSync(
  path.join(BUNDLE_DIR, 'THIRD-PARTY-LICENSES.txt'),
  notices.join('\n\n' + '='.repeat(72) + '\n\n') + '\n',
);

const cache = await buildCompileCache(ROOT, BUNDLE_DIR);
const cacheBytes = fs
  .readdirSync(cache, { recursive: true, withFileTypes: true })
  .filter((e) => e.isFile())
  .reduce((n, e) => n + fs.statSync(path.join(e.parentPath, e.name)).size, 0);

const bytes = Object.values(result.metafile.outputs).reduce((n, o) => n + o.bytes, 0);
console.log(
  `bundle: ${Object.keys(result.metafile.outputs).length} files, ${(bytes / 1e6).toFixed(1)} MB, ${packages.size} packages in ${path.relative(ROOT, BUNDLE_DIR)}/; compile cache ${(cacheBytes / 1e6).toFixed(2)} MB`,
);
