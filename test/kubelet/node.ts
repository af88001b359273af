// A real Kubernetes node in the VM-tier guest: containerd, runc, the CNI bridge and kubelet
// v1.37.2 (test/kubelet/guest-node.sh), registered against the host's kube-apiserver. The guest
// reaches the host only through one QEMU guestfwd relay to the apiserver, at the "kubernetes"
// Service IP a pod would dial (DNATed in the guest, as kube-proxy would route it), and one more
// to the image registry, which the guest's containerd reaches as a mirror of the registry's
// 127.0.0.1 name (the name the release's chart pins the image under).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGuest, repoRoot, type Guest } from '../vm/guest.js';
import type { Cluster } from '../k8s/lib/cluster.js';
import type { Node } from '../k8s/lib/objects.js';

/** The "kubernetes" Service IP (--service-cluster-ip-range's first address). */
export const API_VIP = '10.96.0.1';
/** Where, inside QEMU's user network, the guestfwd relay to the host's apiserver listens. */
const API_FWD = { address: '10.0.2.100', port: 443 };
const KUBELET_HEALTHZ = 10248;

export interface NodeBinaries {
  kubelet: string;
  /** Directory holding containerd, containerd-shim-runc-v2 and ctr. */
  containerdDir: string;
}

/** kubelet and containerd from scripts/k8s-build.sh (cached by version). */
export function nodeBinaries(): NodeBinaries {
  const out = execFileSync(
    'bash',
    [path.join(repoRoot, 'scripts/k8s-build.sh'), 'kubelet', 'containerd', 'containerd-shim-runc-v2', 'ctr'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const bins = Object.fromEntries(
    out
      .trim()
      .split('\n')
      .map((l) => l.split('=', 2) as [string, string]),
  );
  const need = (k: string) => {
    const v = bins[k];
    if (!v) throw new Error(`scripts/k8s-build.sh printed no ${k}`);
    return v;
  };
  return { kubelet: need('KUBELET'), containerdDir: path.dirname(need('CONTAINERD')) };
}

export interface KubeletNodeOptions {
  cluster: Cluster;
  bins: NodeBinaries;
  name: string;
  labels: Record<string, string>;
  /** Image reference → OCI archive; containerd's k8s.io namespace gets them all. */
  images: Record<string, string>;
  sandboxImage: string;
  /** The registry the node pulls the release's image from: host:port, CA (PEM text), the relay's guest-side address. */
  registry: { host: string; ca: string; guestIp: string };
  logDir: string;
  memoryMb?: number;
  log?: (s: string) => void;
}

export interface KubeletNode {
  guest: Guest;
  name: string;
  /** Seconds from QEMU's start to the Node's Ready condition. */
  readySeconds: number;
  stop(): Promise<void>;
}

function kubeconfig(cluster: Cluster, token: string): string {
  const ca = Buffer.from(cluster.ca).toString('base64');
  return [
    'apiVersion: v1',
    'kind: Config',
    `clusters:\n- name: host\n  cluster:\n    server: https://${API_VIP}:443\n    certificate-authority-data: ${ca}`,
    `users:\n- name: kubelet\n  user:\n    token: ${token}`,
    'contexts:\n- name: host\n  context:\n    cluster: host\n    user: kubelet',
    'current-context: host',
    '',
  ].join('\n');
}

export async function startKubeletNode(o: KubeletNodeOptions): Promise<KubeletNode> {
  const token = o.cluster.nodeTokens[o.name];
  if (!token) throw new Error(`startCluster was not asked for a token of node ${o.name}`);
  const log = o.log ?? (() => {});
  const t0 = Date.now();
  fs.mkdirSync(o.logDir, { recursive: true });
  const labels = Object.entries(o.labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
  const containerdRoot = execFileSync(
    'bash',
    [path.join(repoRoot, 'test/kubelet/containerd-root.sh'), o.bins.containerdDir, ...Object.values(o.images)],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
  ).trim();
  const registryPort = Number(o.registry.host.split(':')[1]);
  if (!Number.isInteger(registryPort)) throw new Error(`registry ${o.registry.host}: no port`);
  const guest = await startGuest({
    memoryMb: o.memoryMb ?? 3072,
    guestForwards: [
      { guestAddress: API_FWD.address, guestPort: API_FWD.port, hostPort: o.cluster.port },
      { guestAddress: o.registry.guestIp, guestPort: registryPort, hostPort: registryPort },
    ],
    waitPorts: [KUBELET_HEALTHZ],
    run: `exec bash ${path.join(repoRoot, 'test/kubelet/guest-node.sh')}`,
    env: {
      KN_CONTAINERD_DIR: o.bins.containerdDir,
      KN_KUBELET: o.bins.kubelet,
      KN_KUBECONFIG_DATA: kubeconfig(o.cluster, token),
      KN_NODE_NAME: o.name,
      KN_NODE_LABELS: labels,
      KN_CONTAINERD_ROOT: containerdRoot,
      KN_SANDBOX_IMAGE: o.sandboxImage,
      KN_REGISTRY: o.registry.host,
      KN_REGISTRY_MIRROR: `${o.registry.guestIp}:${registryPort}`,
      KN_REGISTRY_CA_DATA: o.registry.ca,
      KN_API_VIP: API_VIP,
      KN_API_FWD: `${API_FWD.address}:${API_FWD.port}`,
      VM_HOSTNAME: o.name,
    },
    logDir: o.logDir,
    readyTimeoutMs: 900_000,
    log,
  });
  try {
    await waitNodeReady(o.cluster, o.name, 600_000, guest);
  } catch (e) {
    await guest.stop();
    throw e;
  }
  const readySeconds = (Date.now() - t0) / 1000;
  log(`kubelet node ${o.name}: Ready ${readySeconds.toFixed(1)} s after the guest started`);
  return { guest, name: o.name, readySeconds, stop: () => guest.stop() };
}

export async function waitNodeReady(cluster: Cluster, name: string, timeoutMs: number, guest?: Guest): Promise<Node> {
  const end = Date.now() + timeoutMs;
  let last = 'no Node object yet';
  for (;;) {
    const node = await cluster.kube.tryGet<Node>(`/api/v1/nodes/${name}`);
    const ready = node?.status?.conditions?.find((c) => c.type === 'Ready');
    if (node && ready?.status === 'True') return node;
    if (ready) last = `Ready=${ready.status}: ${ready.reason ?? ''} ${ready.message ?? ''}`;
    if (guest?.runExitCode() !== undefined) throw new Error(`kubelet exited (${guest.runExitCode()}); ${last}`);
    if (Date.now() > end) throw new Error(`Node ${name} not Ready after ${timeoutMs / 1000} s: ${last}`);
    await sleep(1000);
  }
}
