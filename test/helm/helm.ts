// Runs the project's helm binary against charts/pve-nfs-csi and hands the rendered objects to
// the chart tests as plain data. Shared by test/helm/*.test.ts; not a test itself.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const CHART = path.join(ROOT, 'charts/pve-nfs-csi');
export const SEED_VALUES = path.join(ROOT, 'test/helm/seed-values.yaml');
/**
 * A helm built with `go install` reports Kubernetes v1.20 as the cluster version (release builds
 * set it at link time), below the chart's kubeVersion; so every render names a version.
 */
export const KUBE_VERSION = 'v1.33.0';

export interface Metadata {
  name: string;
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: Metadata;
  [field: string]: unknown;
}
export interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string } };
}
export interface VolumeMount {
  name: string;
  mountPath: string;
  mountPropagation?: string;
  readOnly?: boolean;
}
export interface SecurityContext {
  privileged?: boolean;
  runAsNonRoot?: boolean;
  runAsUser?: number;
  allowPrivilegeEscalation?: boolean;
  readOnlyRootFilesystem?: boolean;
  capabilities?: { add?: string[]; drop?: string[] };
  sysctls?: { name: string; value: string }[];
}
export interface Probe {
  httpGet?: { path: string; port: number | string; host?: string };
}
export interface Container {
  name: string;
  image: string;
  args?: string[];
  env?: EnvVar[];
  ports?: { name?: string; containerPort: number }[];
  securityContext?: SecurityContext;
  livenessProbe?: Probe;
  volumeMounts?: VolumeMount[];
}
export interface Volume {
  name: string;
  emptyDir?: object;
  hostPath?: { path: string; type?: string };
  secret?: { secretName: string; items?: { key: string; path: string }[] };
}
export interface Toleration {
  key?: string;
  operator?: string;
  effect?: string;
}
export interface PodSpec {
  serviceAccountName?: string;
  hostNetwork?: boolean;
  securityContext?: SecurityContext;
  nodeSelector?: Record<string, string>;
  tolerations?: Toleration[];
  containers: Container[];
  volumes?: Volume[];
}
export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

export interface Rendered {
  objects: K8sObject[];
  /** The object of that kind and name; throws when it is missing. */
  get(kind: string, name: string): K8sObject;
  find(kind: string, name: string): K8sObject | undefined;
  all(kind: string): K8sObject[];
  /** The one object of that kind (the Deployment, the DaemonSet); throws when there are none or several. */
  one(kind: string): K8sObject;
}

export function helmBinary(): string {
  const bin = process.env.HELM ?? path.join(ROOT, '.tools/helm');
  if (!fs.existsSync(bin)) {
    throw new Error(
      `helm not found at ${bin}: run test/helm/tier.sh (it installs helm v3.22.0 into .tools/) or set HELM`,
    );
  }
  return bin;
}

/** Runs helm with its state under .cache/, so nothing in the user's home is read or written. */
export function helm(args: string[]): { status: number; stdout: string; stderr: string } {
  const home = path.join(ROOT, '.cache/helm');
  const res = spawnSync(helmBinary(), args, {
    cwd: ROOT,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
    env: {
      ...process.env,
      HELM_CACHE_HOME: path.join(home, 'cache'),
      HELM_CONFIG_HOME: path.join(home, 'config'),
      HELM_DATA_HOME: path.join(home, 'data'),
    },
  });
  if (res.error) throw res.error;
  return { status: res.status ?? -1, stdout: res.stdout, stderr: res.stderr };
}

export interface RenderOptions {
  valuesFiles?: string[];
  set?: string[];
  /** APIs the cluster is taken to serve beyond the built-in ones (`helm template --api-versions`). */
  apiVersions?: string[];
  namespace?: string;
  release?: string;
}

function templateArgs(o: RenderOptions): string[] {
  const args = [
    'template',
    o.release ?? 'pve',
    CHART,
    '--namespace',
    o.namespace ?? 'csi-storage',
    '--kube-version',
    KUBE_VERSION,
  ];
  for (const f of o.valuesFiles ?? []) args.push('--values', f);
  for (const s of o.set ?? []) args.push('--set', s);
  for (const a of o.apiVersions ?? []) args.push('--api-versions', a);
  return args;
}

/** `--set` lines for an inline Proxmox cluster: values.yaml's `proxmox.config.clusters[0]`. */
export function inlineCluster(fields: Record<string, string>): string[] {
  return Object.entries(fields).map(([k, v]) => `proxmox.config.clusters[0].${k}=${v}`);
}

export function render(o: RenderOptions = {}): Rendered {
  const res = helm(templateArgs(o));
  if (res.status !== 0) throw new Error(`helm template failed (${res.status}): ${res.stderr}`);
  const objects: K8sObject[] = [];
  for (const doc of parseAllDocuments(res.stdout)) {
    if (doc.errors.length > 0) throw new Error(`rendered YAML does not parse: ${doc.errors[0]?.message}`);
    const value: unknown = doc.toJS();
    if (value !== null && value !== undefined) objects.push(value as K8sObject);
  }
  const find = (kind: string, name: string) => objects.find((x) => x.kind === kind && x.metadata.name === name);
  return {
    objects,
    find,
    all: (kind) => objects.filter((x) => x.kind === kind),
    one(kind) {
      const [found, ...more] = objects.filter((x) => x.kind === kind);
      if (!found || more.length > 0)
        throw new Error(`${more.length + (found ? 1 : 0)} ${kind} objects rendered, expected one`);
      return found;
    },
    get(kind, name) {
      const found = find(kind, name);
      if (!found)
        throw new Error(`no ${kind} ${name} among ${objects.map((x) => `${x.kind}/${x.metadata.name}`).join(', ')}`);
      return found;
    },
  };
}

/** Renders values that must be refused; returns helm's error output. */
export function renderError(o: RenderOptions): string {
  const res = helm(templateArgs(o));
  if (res.status === 0) throw new Error(`helm template accepted values it should refuse: ${JSON.stringify(o)}`);
  return res.stderr;
}

export function podSpec(o: K8sObject): PodSpec {
  const spec = o.spec as { template?: { spec?: PodSpec } } | undefined;
  if (!spec?.template?.spec) throw new Error(`${o.kind}/${o.metadata.name} has no pod template`);
  return spec.template.spec;
}

export function container(spec: PodSpec, name: string): Container {
  const c = spec.containers.find((x) => x.name === name);
  if (!c) throw new Error(`no container ${name} among ${spec.containers.map((x) => x.name).join(', ')}`);
  return c;
}

export function volume(spec: PodSpec, name: string): Volume {
  const v = (spec.volumes ?? []).find((x) => x.name === name);
  if (!v) throw new Error(`no volume ${name}`);
  return v;
}

/** The value of a flag written either as `--flag=value` or as `--flag value`. */
export function flag(args: string[] | undefined, name: string): string | undefined {
  const list = args ?? [];
  for (const [i, a] of list.entries()) {
    if (a.startsWith(`${name}=`)) return a.slice(name.length + 1);
    if (a === name) return list[i + 1];
  }
  return undefined;
}

export function mountAt(c: Container, mountPath: string): VolumeMount | undefined {
  return (c.volumeMounts ?? []).find((m) => m.mountPath === mountPath);
}

/** The volume mounted at `mountPath` in a container; throws when nothing is mounted there. */
export function mountedVolume(spec: PodSpec, c: Container, mountPath: string): Volume {
  const m = mountAt(c, mountPath);
  if (!m) throw new Error(`container ${c.name}: nothing mounted at ${mountPath}`);
  return volume(spec, m.name);
}

export function rules(o: K8sObject): PolicyRule[] {
  return (o.rules as PolicyRule[] | undefined) ?? [];
}

/** Whether some rule grants `verb` on `resource` in `group`. */
export function allows(o: K8sObject, group: string, resource: string, verb: string): boolean {
  return rules(o).some((r) => r.apiGroups.includes(group) && r.resources.includes(resource) && r.verbs.includes(verb));
}
