// VolumeSnapshots in the k8s tier: the snapshot.storage.k8s.io CRDs of the external-snapshotter
// release the chart pins, one snapshot-controller under a ServiceAccount of its own with the
// rules of that release's deploy/kubernetes/snapshot-controller RBAC (group snapshots left out:
// their feature gate is off), and the objects a user or VolSync creates.
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { start, type Proc } from '../../harness/procs.js';
import { present } from '../../helpers/present.js';
import { kubeconfig, type Cluster } from './cluster.js';
import type { Env } from './env.js';
import type { Kube } from './kube.js';
import type { TokenRequest } from './objects.js';
import { APPS } from './workload.js';

export const SNAPSHOT_API = '/apis/snapshot.storage.k8s.io/v1';
const CRD_API = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions';
const RBAC = 'rbac.authorization.k8s.io/v1';
const SNAPSHOT_GROUP = 'snapshot.storage.k8s.io';

export interface VolumeSnapshot {
  metadata: { name: string; namespace?: string; uid: string; finalizers?: string[]; deletionTimestamp?: string };
  spec: { volumeSnapshotClassName?: string; source: { persistentVolumeClaimName?: string } };
  status?: {
    readyToUse?: boolean;
    boundVolumeSnapshotContentName?: string;
    restoreSize?: string;
    creationTime?: string;
    error?: { message?: string; time?: string };
  };
}
export interface VolumeSnapshotContent {
  metadata: { name: string; uid: string; finalizers?: string[] };
  spec: {
    driver: string;
    deletionPolicy: 'Delete' | 'Retain';
    source: { volumeHandle?: string; snapshotHandle?: string };
    volumeSnapshotRef: { name?: string; namespace?: string };
  };
  status?: { readyToUse?: boolean; snapshotHandle?: string; restoreSize?: number; error?: { message?: string } };
}

export const snapshotPath = (name: string, ns = APPS) => `${SNAPSHOT_API}/namespaces/${ns}/volumesnapshots/${name}`;
export const contentPath = (name: string) => `${SNAPSHOT_API}/volumesnapshotcontents/${name}`;

/** The CRDs (one YAML file each, from scripts/k8s-build.sh), created and waited for until Established. */
export async function installSnapshotCrds(kube: Kube, crdDir: string): Promise<string[]> {
  const files = fs
    .readdirSync(crdDir)
    .filter((f) => f.endsWith('.yaml'))
    .sort();
  const names: string[] = [];
  for (const f of files) {
    const crd = YAML.parse(fs.readFileSync(path.join(crdDir, f), 'utf8')) as { metadata: { name: string } };
    await kube.create(CRD_API, crd);
    names.push(crd.metadata.name);
  }
  for (const n of names) {
    await kube.waitFor(
      `${CRD_API}/${n}`,
      (o: { status?: { conditions?: { type: string; status: string }[] } }) =>
        (o.status?.conditions ?? []).some((c) => c.type === 'Established' && c.status === 'True'),
      `CRD ${n} to be Established`,
      30_000,
    );
  }
  return names;
}

const rule = (apiGroups: string[], resources: string[], verbs: string[]) => ({ apiGroups, resources, verbs });
/** external-snapshotter v8's deploy/kubernetes/snapshot-controller/rbac-snapshot-controller.yaml, without group snapshots. */
const CONTROLLER_RULES = [
  rule([''], ['persistentvolumes'], ['get', 'list', 'watch']),
  rule([''], ['persistentvolumeclaims'], ['get', 'list', 'watch', 'update']),
  rule([''], ['events'], ['list', 'watch', 'create', 'update', 'patch']),
  rule([SNAPSHOT_GROUP], ['volumesnapshotclasses'], ['get', 'list', 'watch']),
  rule([SNAPSHOT_GROUP], ['volumesnapshotcontents'], ['create', 'get', 'list', 'watch', 'update', 'delete', 'patch']),
  rule([SNAPSHOT_GROUP], ['volumesnapshotcontents/status'], ['patch']),
  rule([SNAPSHOT_GROUP], ['volumesnapshots'], ['create', 'get', 'list', 'watch', 'update', 'patch', 'delete']),
  rule([SNAPSHOT_GROUP], ['volumesnapshots/status'], ['update', 'patch']),
];
const LEASE_RULES = [rule(['coordination.k8s.io'], ['leases'], ['get', 'watch', 'list', 'delete', 'update', 'create'])];

/**
 * snapshot-controller as its upstream Deployment runs it (leader election in kube-system), as a
 * process here with a token of its own ServiceAccount, so the upstream RBAC is what authorizes it.
 */
export async function startSnapshotController(cluster: Cluster, bin: string): Promise<Proc> {
  const { kube } = cluster;
  const ns = 'kube-system';
  const name = 'snapshot-controller';
  const subjects = [{ kind: 'ServiceAccount', name, namespace: ns }];
  await kube.create(`/api/v1/namespaces/${ns}/serviceaccounts`, {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: { name },
  });
  for (const o of [
    { kind: 'ClusterRole', metadata: { name: `${name}-runner` }, rules: CONTROLLER_RULES },
    {
      kind: 'ClusterRoleBinding',
      metadata: { name: `${name}-role` },
      subjects,
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: `${name}-runner` },
    },
    { kind: 'Role', metadata: { name: `${name}-leaderelection`, namespace: ns }, rules: LEASE_RULES },
    {
      kind: 'RoleBinding',
      metadata: { name: `${name}-leaderelection`, namespace: ns },
      subjects,
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: `${name}-leaderelection` },
    },
  ])
    await kube.apply({ apiVersion: RBAC, ...o }, ns);
  const tr = await kube.create<TokenRequest>(`/api/v1/namespaces/${ns}/serviceaccounts/${name}/token`, {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'TokenRequest',
    spec: { expirationSeconds: 7200 },
  });
  const config = path.join(cluster.dir, 'snapshot-controller.kubeconfig');
  fs.writeFileSync(config, kubeconfig(cluster.server, cluster.caFile, present(tr.status?.token, 'a token')));
  return start(
    name,
    bin,
    [
      `--kubeconfig=${config}`,
      '--leader-election',
      `--leader-election-namespace=${ns}`,
      '--feature-gates=CSIVolumeGroupSnapshot=false',
      // Retries of a snapshot whose source is not bound yet, at most this far apart (default 5 m).
      '--retry-interval-max=10s',
      '--v=2',
    ],
    { logFile: path.join(cluster.dir, 'logs', `${name}.log`) },
  );
}

/** A VolumeSnapshot of `pvc` in the apps namespace; without a class, the driver's default class. */
export async function createSnapshot(env: Env, name: string, pvc: string, className?: string): Promise<VolumeSnapshot> {
  return env.kube.create<VolumeSnapshot>(`${SNAPSHOT_API}/namespaces/${APPS}/volumesnapshots`, {
    apiVersion: `${SNAPSHOT_GROUP}/v1`,
    kind: 'VolumeSnapshot',
    metadata: { name },
    spec: {
      ...(className !== undefined && { volumeSnapshotClassName: className }),
      source: { persistentVolumeClaimName: pvc },
    },
  });
}

/** Waits until the snapshot is ReadyToUse; returns it with its VolumeSnapshotContent. */
export async function waitSnapshotReady(
  env: Env,
  name: string,
  timeoutMs = 120_000,
): Promise<{ snapshot: VolumeSnapshot; content: VolumeSnapshotContent }> {
  const snapshot = await env.kube.waitFor(
    snapshotPath(name),
    (o: VolumeSnapshot) => o.status?.readyToUse === true,
    `VolumeSnapshot ${APPS}/${name} to be ReadyToUse`,
    timeoutMs,
    env.sidecarErrors,
  );
  const contentName = present(snapshot.status?.boundVolumeSnapshotContentName, `${name}: its content`);
  const content = await env.kube.get<VolumeSnapshotContent>(contentPath(contentName));
  return { snapshot, content };
}

/** A claim's dataSource: a VolumeSnapshot, or another claim (a clone). */
export const fromSnapshot = (name: string) => ({
  dataSource: { apiGroup: SNAPSHOT_GROUP, kind: 'VolumeSnapshot', name },
});
export const fromClaim = (name: string) => ({ dataSource: { kind: 'PersistentVolumeClaim', name } });
