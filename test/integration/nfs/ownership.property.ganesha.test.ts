// The NFS ownership property against real nfs-ganesha: a few export layouts (v4-only, v3+v4
// spoken as v3, v3+v4 after the controller fell back to v4; each with a nested export of its own
// fsid inside the driver's folder and a sibling export on another pseudo path) × a generated set
// of symlinks (to siblings, parents, "/", into the nested export, inside a claim, as an archive
// target) × generated handles × CreateVolume/DeleteVolume. Before each case the tree is rebuilt
// on disk with its links; after it,
// every path that went, came or moved (by inode) must lie in the one claim directory, its
// archive target or their empty parents, on the share's own export, and nothing may change
// when the share is not inside an export or the path leads through a symlink.
//   PBT_SEED=<n> replays; PBT_GANESHA_RUNS (or PBT_RUNS)=<n> cases per layout (default 20).
import t from 'tap';
import fc from 'fast-check';
import fs from 'node:fs/promises';
import path from 'node:path';
import { parseVolumeId } from '../../../src/nfs/volume-id.js';
import { normaliseShare } from '../../../src/nfs/path-rules.js';
import { type Ganesha, startGanesha } from './ganesha.js';
import { controllerOn, createReq, ctx, picture } from './ownership-rig.js';
import { freePort } from '../../helpers/free-port.js';
import {
  type Step,
  changedPaths,
  claimMayChange,
  pbtParams,
  steps,
  volumeId,
} from '../../unit/nfs/controller/store/ownership-model.js';

const EXPORT = '/volume1/k8s-volumes';
const NESTED = `${EXPORT}/talos/nested`;
const OTHER = '/volume2/other';
const EXTRA = [`${NESTED}=export/talos/nested@7.7`, `${OTHER}=other`];

/** The exports as pseudo path -> directory below the server's dir (deepest first). */
const ROOTS: Array<[string, string]> = [
  [NESTED, 'export/talos/nested'],
  [OTHER, 'other'],
  [EXPORT, 'export'],
];

async function reset(g: Ganesha, links: readonly string[]): Promise<void> {
  for (const rel of ['export', 'other']) {
    const d = path.join(g.dir, rel);
    for (const e of await fs.readdir(d))
      if (!(rel === 'export' && e === 'talos')) await fs.rm(path.join(d, e), { recursive: true });
  }
  const talos = path.join(g.dir, 'export/talos');
  for (const e of await fs.readdir(talos)) if (e !== 'nested') await fs.rm(path.join(talos, e), { recursive: true });
  for (const e of await fs.readdir(path.join(talos, 'nested')))
    await fs.rm(path.join(talos, 'nested', e), { recursive: true });
  const files: Record<string, string> = {
    'export/talos/ns/pvc/data.txt': 'claim',
    'export/talos/media/app/db': 'db',
    'export/talos/archived-apps/old/keep': 'old',
    'export/photos/2023/img.jpg': 'jpg',
    'export/outside.txt': 'x',
    'export/talos/nested/ns/pvc/inner.txt': 'inner',
    'other/ns/pvc/x': 'x',
  };
  for (const [p, body] of Object.entries(files)) {
    await fs.mkdir(path.dirname(path.join(g.dir, p)), { recursive: true });
    await fs.writeFile(path.join(g.dir, p), body);
  }
  for (const name of links) {
    const [, to = ''] = LINKS.find(([n]) => n === name) ?? [];
    await fs.mkdir(path.dirname(path.join(talos, name)), { recursive: true });
    await fs.symlink(to, path.join(talos, name));
  }
}

/** Symlinks a case may find below talos: to siblings, parents, "/", into the nested export. */
const LINKS = [
  ['link-sib', 'media'],
  ['link-parent', '..'],
  ['link-root', '/'],
  ['archived-media', 'media'], // an archive target that is a link
  ['archived-ns', 'nested'], // an archive folder that leads into another export
  ['ns/pvc/escape', '/'], // inside a claim: deleted as a link, never followed
  ['media/app/up', '../../..'],
  ['nested-link', 'nested/ns'],
] as const;
const LINK_NAMES = LINKS.map(([n]) => n);

/** Everything in the exports, keyed by inode, with pseudo paths. */
async function snapshot(g: Ganesha): Promise<Map<string, { path: string; type: string; fs: string }>> {
  const out = new Map<string, { path: string; type: string; fs: string }>();
  for (const [pseudo, rel] of [
    [EXPORT, 'export'],
    [OTHER, 'other'],
  ] as const) {
    for (const [p, id] of await picture(path.join(g.dir, rel))) {
      const abs = `${pseudo}/${p}`;
      const fsOf = ROOTS.find(([root]) => abs === root || abs.startsWith(root + '/'))?.[0] ?? '';
      out.set(id.split(':')[0] ?? '', { path: abs, type: id.endsWith(':d') ? 'dir' : 'other', fs: fsOf });
    }
  }
  return out;
}

/** The export a share lies in, when it is a directory inside one reached without a link. */
async function shareExport(g: Ganesha, share: string): Promise<string | undefined> {
  const root = ROOTS.find(([r]) => share === r || share.startsWith(r + '/'));
  if (!root) return undefined;
  let p = path.join(g.dir, root[1]);
  for (const s of share.slice(root[0].length).split('/').filter(Boolean)) {
    p = path.join(p, s);
    const st = await fs.lstat(p).catch(() => null);
    if (!st?.isDirectory()) return undefined;
  }
  return root[0];
}

async function runStep(g: Ganesha, c: ReturnType<typeof controllerOn>, step: Step): Promise<string[]> {
  const before = await snapshot(g);
  let target: { share: string; subDir: string } | undefined;
  if (step.kind === 'delete') {
    const id = volumeId(step.h);
    target = parseVolumeId(id) ?? undefined;
    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx).catch(() => undefined);
  } else {
    const params = {
      server: g.server,
      share: step.h.share,
      subDir: step.h.subDir,
      onDelete: step.h.policy || 'delete',
    };
    try {
      target = { share: normaliseShare(step.h.share), subDir: step.h.subDir || 'pv-x' };
    } catch {
      target = undefined;
    }
    await c.createVolume(createReq('pv-x', params), ctx).catch(() => undefined);
  }
  const changed = changedPaths(before, await snapshot(g));
  const exp = target && (await shareExport(g, target.share.replace(/\/$/, '') || '/'));
  const share = target?.share.replace(/\/$/, '') ?? '';
  return changed
    .filter((x) => {
      if (!target || !exp || x.fs !== exp || !x.path.startsWith(share + '/')) return true;
      return !claimMayChange(target.subDir, x.path.slice(share.length + 1), x.type);
    })
    .map((x) => `${step.kind} ${volumeId(step.h)}: ${x.path} changed`);
}

const SHARES = [
  '',
  'volume1',
  'volume1/k8s-volumes',
  'volume1/k8s-volumes/talos',
  'volume1/k8s-volumes/talos/nested',
  'volume1/k8s-volumes/talos/link-sib',
  'volume2',
  'volume2/other',
];
const NAMES = [
  'volume1',
  'k8s-volumes',
  'talos',
  'ns',
  'pvc',
  'media',
  'nested',
  'photos',
  'link-sib',
  'link-root',
  'link-parent',
  'archived-media',
  'archived-ns',
  'nested-link',
  'escape',
  'up',
  'app',
];

const LAYOUTS: Array<{ name: string; v4only: boolean; fallback: boolean }> = [
  { name: 'v4-only', v4only: true, fallback: false },
  { name: 'v3+v4 spoken as v3', v4only: false, fallback: false },
  { name: 'v3+v4 after a fall back to v4', v4only: false, fallback: true },
];

const { seed, numRuns: unitRuns } = pbtParams(20);
// A real server is slower than the in-memory NAS: npm run pbt gives it a tenth of PBT_RUNS.
const numRuns = process.env.PBT_GANESHA_RUNS ? Number(process.env.PBT_GANESHA_RUNS) : unitRuns;
const servers = new Map<boolean, Ganesha>();
t.teardown(async () => {
  for (const g of servers.values()) await g.stop();
});

for (const l of LAYOUTS) {
  t.test(`ganesha ${l.name}: nothing outside the one claim directory changes`, async (t) => {
    let g = servers.get(l.v4only);
    if (!g) servers.set(l.v4only, (g = await startGanesha({ v4only: l.v4only, extraExports: EXTRA })));
    // A MOUNT port nobody answers on: the first call falls back to NFSv4 and stays there.
    const c = controllerOn(g, l.fallback ? { mountPort: await freePort(), versionRecheckMs: 3_600_000 } : {});
    t.teardown(() => c.close());
    let cases = 0;
    let stepsRun = 0;
    const started = Date.now();
    const server = g;
    const result = await fc.check(
      fc.asyncProperty(fc.subarray(LINK_NAMES), steps(g.server, SHARES, NAMES, 2), async (links, ss) => {
        cases++;
        await reset(server, links);
        for (const s of ss) {
          stepsRun++;
          const bad = await runStep(server, c, s);
          if (bad.length) throw new Error(bad.join('\n'));
        }
      }),
      { seed, numRuns },
    );
    t.comment(
      `${l.name}: ${cases} cases, ${stepsRun} steps, seed ${seed} (PBT_SEED=${seed}), ${Date.now() - started} ms`,
    );
    const why = result.errorInstance instanceof Error ? `\n${result.errorInstance.message}` : '';
    t.notOk(result.failed, (result.failed && `${fc.defaultReportMessage(result)}${why}`) || 'no counterexample');
  });
}
