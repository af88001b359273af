// The chart as `helm template` renders it, and applying the result to the API server the way
// `kubectl apply --server-side` would (no kubectl needed: discovery + server-side apply).
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import YAML from 'yaml';
import { ROOT } from './cluster.js';
import type { Kube } from './kube.js';
import type { RenderedKinds } from './objects.js';

export const CHART = path.join(ROOT, 'charts/pve-nfs-csi');
export const SEED_VALUES = path.join(ROOT, 'test/helm/seed-values.yaml');

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; annotations?: Record<string, string>; [k: string]: unknown };
  [k: string]: unknown;
}

/** helm from .tools/ (scripts/lib/ensure.sh ensure_helm puts it there). */
export function helmBinary(): string {
  const bin = path.join(ROOT, '.tools/helm');
  if (!fs.existsSync(bin)) {
    execFileSync('bash', ['-c', 'source scripts/lib/ensure.sh && ensure_helm'], {
      cwd: ROOT,
      stdio: ['ignore', 'inherit', 'inherit'],
    });
  }
  return bin;
}

/**
 * `helm template` of the chart (this tree's, or `chart`: a packaged or oci:// one, with
 * `chartArgs` such as --version and --ca-file) with `values`.
 */
export function render(opts: {
  values: unknown;
  namespace: string;
  kubeVersion: string;
  dir: string;
  chart?: string;
  chartArgs?: string[];
}): K8sObject[] {
  const valuesFile = path.join(opts.dir, 'values.yaml');
  fs.writeFileSync(valuesFile, YAML.stringify(opts.values));
  const env = {
    ...process.env,
    HELM_CACHE_HOME: path.join(opts.dir, 'helm/cache'),
    HELM_CONFIG_HOME: path.join(opts.dir, 'helm/config'),
    HELM_DATA_HOME: path.join(opts.dir, 'helm/data'),
  };
  const out = execFileSync(
    helmBinary(),
    [
      'template',
      'pve-nfs-csi',
      opts.chart ?? CHART,
      ...(opts.chartArgs ?? []),
      '--namespace',
      opts.namespace,
      '--kube-version',
      opts.kubeVersion,
      '--values',
      valuesFile,
    ],
    {
      encoding: 'utf8',
      env,
      maxBuffer: 64 << 20,
    },
  );
  fs.writeFileSync(path.join(opts.dir, 'rendered.yaml'), out);
  return YAML.parseAllDocuments(out)
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => !!o && typeof o === 'object' && !!o.kind);
}

/** Helm's install order, roughly: what others refer to goes first. */
const ORDER = [
  'Namespace',
  'ServiceAccount',
  'Secret',
  'ConfigMap',
  'ClusterRole',
  'ClusterRoleBinding',
  'Role',
  'RoleBinding',
  'CSIDriver',
  'StorageClass',
  'Service',
  'PodDisruptionBudget',
  'DaemonSet',
  'Deployment',
];
const rank = (k: string) => (ORDER.includes(k) ? ORDER.indexOf(k) : ORDER.length - 2);

/** Hooks (helm.sh/hook) run around an install, not as part of it; the tier leaves them out. */
export const isHook = (o: K8sObject) => !!o.metadata.annotations?.['helm.sh/hook'];

export async function applyAll(kube: Kube, objects: K8sObject[], namespace: string): Promise<void> {
  for (const o of [...objects].sort((a, b) => rank(a.kind) - rank(b.kind))) {
    try {
      await kube.apply(o, namespace);
    } catch (e) {
      throw new Error(`applying ${o.kind} ${o.metadata.name}: ${(e as Error).message}`, { cause: e });
    }
  }
}

/** The rendered objects of one kind (typed by RenderedKinds), those `pred` accepts. */
export const find = <K extends keyof RenderedKinds>(
  objects: K8sObject[],
  kind: K,
  pred: (o: RenderedKinds[K]) => boolean = () => true,
): RenderedKinds[K][] =>
  objects
    .filter((o) => o.kind === kind)
    .map((o) => o as RenderedKinds[K])
    .filter(pred);

/** The one rendered object of a kind (the chart has one Deployment, one DaemonSet). */
export function only<K extends keyof RenderedKinds>(objects: K8sObject[], kind: K): RenderedKinds[K] {
  const [o, ...more] = find(objects, kind);
  if (!o || more.length)
    throw new Error(`the chart rendered ${more.length + (o ? 1 : 0)} ${kind} objects, expected one`);
  return o;
}
