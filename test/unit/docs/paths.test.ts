// Every repository path, file and `npm run` command the README, CONTRIBUTING.md and docs/ name
// exists: a renamed file or script fails here instead of leaving a reader at a dead end. What
// is checked, in `code spans` and relative links:
//   - a path under one of the repository's top folders (src/, test/, docs/, scripts/, ...);
//   - a bare file name of ours (`tier.ts`, `ensure.sh`): some tracked file has that name (a
//     `.js` name is fine when its `.ts` source is: the build output);
//   - `npm run <script>`: package.json has the script;
//   - no absolute path into a development machine (/work/, /home/, /root/).
// Placeholders (`<driver>`, `*`, `…`) are skipped; UPSTREAM names other projects' files.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const TOP = ['src', 'test', 'docs', 'scripts', 'bench', 'sim', 'charts', 'proto', 'image', '.github'];
/** Paths of other projects the docs cite (the upstream driver's repository, Proxmox VE's sources). */
const UPSTREAM = [/^docs\/deploy\/pvc\.yaml$/, /^src\/PVE\//];

export function namedPaths(doc: string): { paths: string[]; links: string[]; scripts: string[] } {
  const words = [...doc.matchAll(/`([^`\n]+)`/g)].flatMap((m) => (m[1] ?? '').split(/[\s,()]+/));
  const paths = words
    .map((w) =>
      w
        .replace(/[.;:]+$/, '')
        .replace(/#.*$/, '')
        .replace(/:\d+(-\d+)?$/, ''),
    )
    .filter((w) => w !== '' && !/[<>*{}$…]|\.\.\./.test(w))
    .filter(
      (w) =>
        TOP.some((top) => w.startsWith(`${top}/`)) ||
        /^[\w.-]+\.(ts|sh|mjs|js)$/.test(w) ||
        /^\/(work|home|root|Users)\//.test(w),
    );
  const links = [...doc.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((m) => (m[1] ?? '').split('#')[0] ?? '')
    .filter((u) => u !== '' && !/^[a-z]+:/.test(u));
  const scripts = [...doc.matchAll(/npm run (?:--silent )?([\w:-]+)/g)].map((m) => m[1] ?? '');
  return { paths, links, scripts };
}

t.test('every path, file and npm script the docs name exists', async (t) => {
  const tracked = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' }).split('\n').filter(Boolean);
  const names = new Set(tracked.map((f) => path.basename(f)));
  const scripts = (
    JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
  ).scripts;
  const docs = [
    'README.md',
    'CONTRIBUTING.md',
    ...fs
      .readdirSync(path.join(ROOT, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => `docs/${f}`),
  ];
  t.ok(docs.length > 10, 'the walker found the docs');
  const missing: string[] = [];
  for (const doc of docs) {
    const named = namedPaths(fs.readFileSync(path.join(ROOT, doc), 'utf8'));
    for (const p of named.paths) {
      if (p.startsWith('/')) missing.push(`${doc}: ${p} (a development machine's path)`);
      else if (!p.includes('/')) {
        if (!names.has(p) && !(p.endsWith('.js') && names.has(p.replace(/\.js$/, '.ts')))) missing.push(`${doc}: ${p}`);
      } else if (!UPSTREAM.some((u) => u.test(p)) && !fs.existsSync(path.join(ROOT, p))) missing.push(`${doc}: ${p}`);
    }
    for (const l of named.links)
      if (!fs.existsSync(path.join(ROOT, path.dirname(doc), l))) missing.push(`${doc}: link ${l}`);
    for (const s of named.scripts) if (!(s in scripts)) missing.push(`${doc}: npm run ${s}`);
  }
  t.same(missing, []);
});

t.test('what the check reads', async (t) => {
  const doc =
    'Run `npm run sanity -- nfs` and `npx tap test/unit/x.test.ts:12`; see [a](design.md#x), [b](https://e.org), `src/<driver>/index.ts`, `vm-tier.ts luks`, `/work/tools/x.sh`, `/dev/sdb`.';
  t.same(namedPaths(doc), {
    paths: ['test/unit/x.test.ts', 'vm-tier.ts', '/work/tools/x.sh'],
    links: ['design.md'],
    scripts: ['sanity'],
  });
});
