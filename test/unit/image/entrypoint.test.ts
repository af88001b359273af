// image/entrypoint.sh: the heap size it derives from a cgroup memory limit (v2 and v1), run with
// the image's shell (dash on Debian) against fake cgroup files and a `node` that reports what it
// was started with.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../image/entrypoint.sh');
const SH = fs.existsSync('/bin/dash') ? '/bin/dash' : '/bin/sh';

function run(
  t: { teardown(fn: () => void): void },
  files: Record<string, string>,
  env: Record<string, string> = {},
  main?: string,
): { nodeOptions: string; tunables: string; lateFlags: string; compileCache: string; argv: string[] } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'entrypoint-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const cg = path.join(dir, 'cgroup');
  for (const [name, content] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(cg, name)), { recursive: true });
    fs.writeFileSync(path.join(cg, name), content);
  }
  fs.mkdirSync(path.join(dir, 'bin'));
  // Prints NODE_OPTIONS, GLIBC_TUNABLES, the flags for after start, NODE_COMPILE_CACHE and then
  // each argument on its own line.
  fs.writeFileSync(
    path.join(dir, 'bin/node'),
    '#!/bin/sh\nprintf "%s\\n" "${NODE_OPTIONS:-}" "${GLIBC_TUNABLES-(unset)}" "${PVE_NFS_CSI_V8_FLAGS_AFTER_START-(unset)}" "${NODE_COMPILE_CACHE-(unset)}" "$@"\n',
    { mode: 0o755 },
  );
  // Through env(1): tap adds its own NODE_OPTIONS to every child's environment.
  const assign = Object.entries({ ...env, ...(main !== undefined && { PVE_NFS_CSI_MAIN: main }) }).map(
    ([k, v]) => `${k}=${v}`,
  );
  const out = execFileSync('/usr/bin/env', ['-u', 'NODE_OPTIONS', ...assign, SH, SCRIPT, '--mode', 'controller'], {
    encoding: 'utf8',
    env: { PATH: `${path.join(dir, 'bin')}:/usr/bin:/bin`, CGROUP_ROOT: cg },
  });
  const [nodeOptions = '', tunables = '', lateFlags = '', compileCache = '', ...argv] = out
    .replace(/\n$/, '')
    .split('\n');
  return { nodeOptions, tunables, lateFlags, compileCache, argv };
}

const MiB = 1024 * 1024;
/** The image's V8 flags on the command line (bench/rss.ts measures each). */
const V8_FLAGS = ['--max-semi-space-size=1'];
/** The ones the program sets once it serves (src/late-v8-flags.ts; bench/start.ts says why). */
const LATE_FLAGS = '--no-opt --no-maglev';
/** The image's glibc malloc settings (bench/rss.ts: after load). */
const MALLOC = 'glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=131072';

t.test('cgroup v2 limit sizes the old space: (limit - 96 MiB) / 2', async (t) => {
  t.same(run(t, { 'memory.max': `${192 * MiB}\n` }), {
    nodeOptions: '--max-old-space-size=48',
    tunables: MALLOC,
    lateFlags: LATE_FLAGS,
    compileCache: '(unset)',
    argv: [...V8_FLAGS, '/app/dist/bundle/main.js', '--mode', 'controller'],
  });
  t.equal(run(t, { 'memory.max': `${512 * MiB}\n` }).nodeOptions, '--max-old-space-size=208');
});

t.test('cgroup v1 limit, and v1 "unlimited"', async (t) => {
  t.equal(run(t, { 'memory/memory.limit_in_bytes': `${256 * MiB}\n` }).nodeOptions, '--max-old-space-size=80');
  t.equal(run(t, { 'memory/memory.limit_in_bytes': '9223372036854771712\n' }).nodeOptions, '');
});

t.test('no limit leaves V8 its default', async (t) => {
  t.equal(run(t, { 'memory.max': 'max\n' }).nodeOptions, '');
  t.equal(run(t, {}).nodeOptions, '');
});

t.test('a tiny limit still gets a usable heap', async (t) => {
  t.equal(run(t, { 'memory.max': `${96 * MiB}\n` }).nodeOptions, '--max-old-space-size=16');
});

t.test('NODE_OPTIONS is kept; an explicit heap size wins', async (t) => {
  t.equal(
    run(t, { 'memory.max': `${128 * MiB}\n` }, { NODE_OPTIONS: '--enable-source-maps' }).nodeOptions,
    '--max-old-space-size=16 --enable-source-maps',
  );
  t.equal(
    run(t, { 'memory.max': `${128 * MiB}\n` }, { NODE_OPTIONS: '--max-old-space-size=50' }).nodeOptions,
    '--max-old-space-size=50',
  );
});

t.test('the V8 flags go on the command line; PVE_NFS_CSI_NODE_FLAGS replaces them', async (t) => {
  t.same(run(t, {}).argv.slice(0, V8_FLAGS.length), V8_FLAGS, 'the image default');
  t.same(run(t, {}, { PVE_NFS_CSI_NODE_FLAGS: '--max-semi-space-size=4' }).argv, [
    '--max-semi-space-size=4',
    '/app/dist/bundle/main.js',
    '--mode',
    'controller',
  ]);
  t.same(run(t, {}, { PVE_NFS_CSI_NODE_FLAGS: '' }).argv, ['/app/dist/bundle/main.js', '--mode', 'controller'], 'none');
});

t.test('glibc malloc: 2 arenas and a fixed trim threshold; a GLIBC_TUNABLES already set wins', async (t) => {
  t.equal(run(t, {}).tunables, MALLOC);
  t.equal(run(t, {}, { GLIBC_TUNABLES: 'glibc.malloc.arena_max=1' }).tunables, 'glibc.malloc.arena_max=1');
  t.equal(run(t, {}, { GLIBC_TUNABLES: '' }).tunables, '', 'empty: glibc defaults');
});

t.test(
  'no code-generation flag at start: --no-opt --no-maglev are handed to the program for after start',
  async (t) => {
    t.equal(run(t, {}).lateFlags, LATE_FLAGS);
    t.notMatch(run(t, {}).argv.join(' '), /--no-opt|--no-maglev/);
    t.equal(run(t, {}, { PVE_NFS_CSI_V8_FLAGS_AFTER_START: '' }).lateFlags, '', 'empty: none');
  },
);

t.test("the bundle's compile cache is used when it is there; a NODE_COMPILE_CACHE already set wins", async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'entrypoint-bundle-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const main = path.join(dir, 'main.js');
  t.equal(run(t, {}, {}, main).compileCache, '(unset)', 'no cache directory: none');
  fs.mkdirSync(path.join(dir, 'compile-cache'));
  t.equal(run(t, {}, {}, main).compileCache, path.join(dir, 'compile-cache'));
  t.equal(run(t, {}, {}, main).argv[V8_FLAGS.length], main);
  t.equal(run(t, {}, { NODE_COMPILE_CACHE: '' }, main).compileCache, '', 'set empty: kept (no cache)');
});
