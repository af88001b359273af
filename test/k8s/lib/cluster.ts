// A real Kubernetes control plane on loopback for the k8s tier: etcd, kube-apiserver (RBAC,
// service-account tokens, TokenRequest), kube-controller-manager and kube-scheduler. Binaries come from scripts/k8s-build.sh (cached under ~/.cache/pve-nfs-csi).
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { start, type Proc } from '../../harness/procs.js';
import { freePort } from '../../helpers/free-port.js';
import { selfSigned } from '../../helpers/self-signed.js';
import { Kube } from './kube.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

export type Binaries = Record<
  'ETCD' | 'KUBE_APISERVER' | 'KUBE_CONTROLLER_MANAGER' | 'CSI_PROVISIONER' | 'CSI_ATTACHER' | 'CSI_RESIZER',
  string
> &
  Record<'CSI_SNAPSHOTTER' | 'SNAPSHOT_CONTROLLER' | 'SNAPSHOT_CRDS', string> & { KUBE_SCHEDULER?: string };

/**
 * What the tier runs. kube-scheduler decides where pods go and so WaitForFirstConsumer binding,
 * CSIStorageCapacity and topology, as in any cluster; it shares kube-apiserver's Go build cache,
 * so cold it costs a few minutes more and warm nothing.
 */
export const COMPONENTS = [
  'etcd',
  'csi-provisioner',
  'csi-attacher',
  'csi-resizer',
  // VolumeSnapshots: the chart's snapshotter sidecar, snapshot-controller and the CRDs (a directory).
  'csi-snapshotter',
  'snapshot-controller',
  'snapshot-crds',
  'kube-apiserver',
  'kube-controller-manager',
  'kube-scheduler',
];

/** Builds (or finds in the cache) every binary the tier runs; the build script prints NAME=path. */
export function binaries(components: readonly string[] = COMPONENTS): Binaries {
  const out = execFileSync('bash', [path.join(ROOT, 'scripts/k8s-build.sh'), ...components], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const bins = Object.fromEntries(
    out
      .trim()
      .split('\n')
      .map((l) => l.split('=', 2) as [string, string]),
  );
  return bins as Binaries;
}

/**
 * The controllers a cluster's kube-controller-manager runs that matter here: binding and
 * provisioning hand-off, attach/detach, expansion, protection finalizers, ownership, and what
 * turns the chart's Deployment and DaemonSet into Pods (whose names and owners the provisioner's capacity
 * code reads). The names are v1.37's canonical ones (`kube-controller-manager --help`).
 */
export const CONTROLLERS = [
  'persistentvolume-binder-controller',
  'persistentvolume-attach-detach-controller',
  'persistentvolume-expander-controller',
  'persistentvolumeclaim-protection-controller',
  'persistentvolume-protection-controller',
  'garbage-collector-controller',
  'namespace-controller',
  'serviceaccount-controller',
  'deployment-controller',
  'replicaset-controller',
  'daemonset-controller',
  // Lifts the not-ready taint admission puts on new Nodes once they are Ready with a heartbeat
  // (and would taint them unreachable if the heartbeats stopped), as in any cluster.
  'node-lifecycle-controller',
];

export interface Cluster {
  kube: Kube;
  server: string;
  port: number;
  caFile: string;
  ca: string;
  /** Whether kube-scheduler runs (not in an API-only cluster). */
  scheduler: boolean;
  procs: Proc[];
  dir: string;
  /** A kubeconfig for the admin identity (token auth, the serving certificate as CA). */
  adminConfig: string;
  /** Node name → the token of its kubelet (startCluster's `nodes`). */
  nodeTokens: Record<string, string>;
  stop(): Promise<void>;
}

/** A kubeconfig for `token` (an identity of its own, e.g. a ServiceAccount's). */
export function kubeconfig(server: string, caFile: string, token: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    `- name: local\n  cluster:\n    server: ${server}\n    certificate-authority: ${caFile}`,
    'users:',
    `- name: user\n  user:\n    token: ${token}`,
    'contexts:',
    '- name: local\n  context:\n    cluster: local\n    user: user',
    'current-context: local',
    '',
  ].join('\n');
}

async function until(what: string, fn: () => Promise<boolean>, timeoutMs: number, proc?: Proc): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (proc && proc.child.exitCode !== null)
      throw new Error(`${proc.name} exited with ${proc.child.exitCode}; see ${proc.logFile}`);
    try {
      if (await fn()) return;
    } catch {
      /* not up yet */
    }
    if (Date.now() > end)
      throw new Error(`${what} not ready after ${timeoutMs / 1000} s${proc ? `; see ${proc.logFile}` : ''}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Just what an API client needs (the day-2 CLI tests): etcd and kube-apiserver. */
export const API_ONLY = ['etcd', 'kube-apiserver'];

/**
 * `controllerManager: false` starts only etcd and kube-apiserver (bins needs only ETCD and
 * KUBE_APISERVER then): enough for tests of an API client, seconds faster, no controllers acting.
 */
export async function startCluster(
  dir: string,
  bins: Binaries,
  opts: {
    scheduler?: boolean;
    controllerManager?: boolean;
    /** Nodes a real kubelet runs as: each gets a token (Cluster.nodeTokens). */
    nodes?: string[];
    /** More kube-controller-manager controllers than CONTROLLERS. */
    controllers?: string[];
  } = {},
): Promise<Cluster> {
  fs.mkdirSync(dir, { recursive: true });
  const procs: Proc[] = [];
  const logs = path.join(dir, 'logs');
  fs.mkdirSync(logs, { recursive: true });
  const pki = path.join(dir, 'pki');
  fs.mkdirSync(pki, { recursive: true });
  // One self-signed serving certificate for 127.0.0.1, which is also the CA everybody trusts
  // (what a kubeadm CA is to a pod's ca.crt).
  const { certPath: caFile, keyPath: keyFile } = selfSigned(pki, 'apiserver', {
    keyType: 'rsa',
    commonName: 'kube-apiserver',
    // 10.96.0.1: the "kubernetes" Service IP, which a real kubelet's pods dial (the kubelet tier).
    subjectAltName: 'IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes.default.svc',
    days: 2,
  });
  const saKey = path.join(pki, 'sa.key');
  const saPub = path.join(pki, 'sa.pub');
  execFileSync('openssl', ['genrsa', '-out', saKey, '2048'], { stdio: 'ignore' });
  execFileSync('openssl', ['rsa', '-in', saKey, '-pubout', '-out', saPub], { stdio: 'ignore' });
  const adminToken = crypto.randomBytes(24).toString('hex');
  // Each real kubelet's identity (system:node:<name> in system:nodes), which the Node authorizer
  // limits to its own pods' objects.
  const nodeTokens = Object.fromEntries((opts.nodes ?? []).map((n) => [n, crypto.randomBytes(24).toString('hex')]));
  fs.writeFileSync(
    path.join(pki, 'tokens.csv'),
    [
      `${adminToken},admin,admin,"system:masters"`,
      ...Object.entries(nodeTokens).map(([n, t]) => `${t},system:node:${n},node-${n},"system:nodes"`),
      '',
    ].join('\n'),
  );

  const [etcdPort, etcdPeer, apiPort] = [await freePort(), await freePort(), await freePort()];
  const etcd = start(
    'etcd',
    bins.ETCD,
    [
      '--data-dir',
      path.join(dir, 'etcd'),
      '--listen-client-urls',
      `http://127.0.0.1:${etcdPort}`,
      '--advertise-client-urls',
      `http://127.0.0.1:${etcdPort}`,
      '--listen-peer-urls',
      `http://127.0.0.1:${etcdPeer}`,
      '--initial-advertise-peer-urls',
      `http://127.0.0.1:${etcdPeer}`,
      '--initial-cluster',
      `default=http://127.0.0.1:${etcdPeer}`,
      '--log-level',
      'warn',
      '--unsafe-no-fsync',
    ],
    { logFile: path.join(logs, 'etcd.log') },
  );
  procs.push(etcd);
  await until('etcd', async () => (await fetch(`http://127.0.0.1:${etcdPort}/health`)).ok, 30_000, etcd);

  const server = `https://127.0.0.1:${apiPort}`;
  const apiserver = start(
    'kube-apiserver',
    bins.KUBE_APISERVER,
    [
      `--etcd-servers=http://127.0.0.1:${etcdPort}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${apiPort}`,
      `--cert-dir=${path.join(dir, 'apiserver-certs')}`,
      `--tls-cert-file=${caFile}`,
      `--tls-private-key-file=${keyFile}`,
      '--service-account-issuer=https://kubernetes.default.svc',
      `--service-account-key-file=${saPub}`,
      `--service-account-signing-key-file=${saKey}`,
      `--token-auth-file=${path.join(pki, 'tokens.csv')}`,
      '--authorization-mode=Node,RBAC',
      '--service-cluster-ip-range=10.96.0.0/16',
      '--allow-privileged=true',
      '--endpoint-reconciler-type=none',
      '--v=1',
    ],
    { logFile: path.join(logs, 'kube-apiserver.log') },
  );
  procs.push(apiserver);
  const ca = fs.readFileSync(caFile, 'utf8');
  const kube = new Kube(server, adminToken, ca);
  await until('kube-apiserver /readyz', async () => (await kube.req('GET', '/readyz')) === 'ok', 90_000, apiserver);

  const adminConfig = path.join(pki, 'admin.kubeconfig');
  fs.writeFileSync(adminConfig, kubeconfig(server, caFile, adminToken));
  const stop = async () => {
    for (const p of [...procs].reverse()) await p.stop('SIGTERM', 5000);
    await kube.close();
  };
  if (opts.controllerManager === false)
    return { kube, server, port: apiPort, caFile, ca, scheduler: false, procs, dir, adminConfig, nodeTokens, stop };
  // Each controller with its own service account and the bootstrap RBAC roles, as kubeadm runs it.
  const kcm = start(
    'kube-controller-manager',
    bins.KUBE_CONTROLLER_MANAGER,
    [
      `--kubeconfig=${adminConfig}`,
      '--bind-address=127.0.0.1',
      '--secure-port=0',
      '--leader-elect=false',
      `--controllers=${[...CONTROLLERS, ...(opts.controllers ?? [])].join(',')}`,
      `--service-account-private-key-file=${saKey}`,
      '--use-service-account-credentials=true',
      `--root-ca-file=${caFile}`,
      '--v=2',
    ],
    { logFile: path.join(logs, 'kube-controller-manager.log') },
  );
  procs.push(kcm);
  const schedulerBin = (opts.scheduler ?? true) ? bins.KUBE_SCHEDULER : undefined;
  const withScheduler = !!schedulerBin;
  if (schedulerBin) {
    const sched = start(
      'kube-scheduler',
      schedulerBin,
      [`--kubeconfig=${adminConfig}`, '--bind-address=127.0.0.1', '--secure-port=0', '--leader-elect=false', '--v=2'],
      { logFile: path.join(logs, 'kube-scheduler.log') },
    );
    procs.push(sched);
  }
  // The serviceaccount controller creating "default" in kube-system shows the manager is syncing.
  await until(
    'kube-controller-manager',
    async () => !!(await kube.tryGet('/api/v1/namespaces/kube-system/serviceaccounts/default')),
    60_000,
    kcm,
  );

  return {
    kube,
    server,
    port: apiPort,
    caFile,
    ca,
    scheduler: withScheduler,
    procs,
    dir,
    adminConfig,
    nodeTokens,
    stop,
  };
}
