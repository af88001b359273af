// The one list of tiers (scripts/tiers.sh): `npm test` runs its lines in order under the names CI
// and the README quote, the skip switches leave out their phases, and every npm script that runs
// a tier goes through scripts/tier.sh, one name per tier (sanity's driver-level `npm run sanity --
// proxmox` aside). Reads the scripts' dry listings; nothing is run.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';

const ROOT = path.resolve(import.meta.dirname, '../..');
const bash = (script: string, args: string[], env: Record<string, string> = {}) =>
  execFileSync('bash', [path.join(ROOT, 'scripts', script), ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', ...env },
  });

const PHASES = [
  'lint (typescript-eslint, strict type-checked)',
  'format (prettier --check; npm run format rewrites)',
  'typecheck (tsc --noEmit)',
  'build',
  'unit tier (pure: fakes only)',
  'integration tier (ganesha, loop devices, simulator over HTTPS, servers)',
  'Proxmox VE 9 own API code (real qemu-server, pve-storage, access control)',
  'csi-sanity proxmox (mount)',
  'csi-sanity proxmox (block)',
  'csi-sanity nfs',
  'chaos suite (bounded)',
  'helm chart',
  'workflows (actionlint + shellcheck)',
  'image (real Dockerfile, buildah + podman)',
  'csi-sanity proxmox (csi-sanity image, podman)',
  'csi-sanity nfs (csi-sanity + NFS server images, podman)',
  'kubelet images (pause, node-driver-registrar, workload images, podman)',
  'k8s CLI tier (day-2 subcommands: etcd, kube-apiserver, simulator, ganesha)',
  'k8s tier (etcd, kube-apiserver, controller-manager, sidecars, chart)',
  'release (local registry: build, push, helm install, upgrade, rollback)',
  'VM tier (guest: sanity proxmox+nfs, end-to-end)',
  'kubelet tier (guest node: kubelet+containerd+CNI, chart DaemonSet, pods)',
];

const dryRun = (env: Record<string, string> = {}) => {
  const lines = bash('test.sh', ['--dry-run'], env).trim().split('\n');
  return { phases: lines.slice(0, -1).map((l) => l.replace(/^=== /, '')), count: lines.at(-1) };
};

t.test('npm test runs every phase of the list, in order, under its name', async (t) => {
  t.same(dryRun(), { phases: PHASES, count: `${PHASES.length} phases` });
  t.same(
    dryRun({ SKIP_IMAGE: '1', SKIP_VM: '1' }).phases,
    PHASES.filter((p) => !/^(image|VM tier) |images?, podman\)$|^release /.test(p)),
  );
  t.same(dryRun({ SKIP_IMAGE: '0' }).phases, PHASES, 'only 1 skips');
  t.same(
    dryRun({ SKIP_KUBELET: '1' }).phases,
    PHASES.filter((p) => !p.startsWith('kubelet tier')),
    'the kubelet tier is skipped like the others',
  );
  t.same(
    dryRun({ SKIP_PVE_REAL: '1' }).phases,
    PHASES.filter((p) => !p.startsWith('Proxmox VE 9 own API code')),
    'the pve-real tier is skipped by its own switch',
  );
});

t.test('scripts/tier.sh --list: the tiers, and the npm scripts that run them', async (t) => {
  const rows = bash('tier.sh', ['--list']).trim().split('\n').slice(1);
  const tiers = [...new Set(rows.map((r) => r.split(/\s+/)[0]))];
  t.same(tiers, [
    'lint',
    'format',
    'typecheck',
    'build',
    'unit',
    'integration',
    'pve-real',
    'sanity',
    'chaos',
    'chart',
    'workflows',
    'image',
    'containers',
    'k8s-cli',
    'k8s',
    'release',
    'vm',
    'kubelet',
  ]);
  const scripts = (
    JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
  ).scripts;
  const viaTier = Object.entries(scripts).flatMap(([name, cmd]) => {
    const m = /^bash scripts\/tier\.sh (\S+)$/.exec(cmd);
    return m?.[1] ? [[name, m[1]] as const] : [];
  });
  for (const [name, tier] of viaTier) t.ok(tiers.includes(tier), `npm run ${name}: tier ${tier} is in the list`);
  const perTier = new Map<string, string[]>();
  for (const [name, tier] of viaTier) perTier.set(tier, [...(perTier.get(tier) ?? []), name]);
  t.same(
    [...perTier].filter(([, names]) => names.length > 1),
    [],
    'one npm script name per tier',
  );
  const runners = rows.flatMap(
    (r) => /\| *bash ((?:scripts|test)\/\S+\.sh)/.exec(r.replace(/\s{2,}/g, ' | '))?.[1] ?? [],
  );
  const direct = Object.entries(scripts).filter(
    ([name, cmd]) => name !== 'sanity' && runners.some((r) => cmd.startsWith(`bash ${r}`)),
  );
  t.same(direct, [], 'no npm script runs a tier past scripts/tier.sh');
});

t.test('an unknown tier is refused with the list', async (t) => {
  let out = '';
  try {
    bash('tier.sh', ['nope']);
  } catch (e) {
    out = (e as { stderr?: string }).stderr ?? '';
    t.equal((e as { status?: number }).status, 2);
  }
  t.match(out, /unknown tier "nope" \(usage: scripts\/tier.sh lint\|format\|.*\|vm\|kubelet \[args\] \| --list\)/);
});
