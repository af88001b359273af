// The whole k8s-tier environment: control plane, the Proxmox simulator and ganesha, the chart
// rendered with the seed's values and applied, Nodes + CSINodes from a real node plugin's
// NodeGetInfo, and the controller Deployment's pods run as local processes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type * as Lib from '@kubernetes/client-node';
import YAML from 'yaml';
import { startProxmoxBackend, type Backends } from '../../harness/backends.js';
import { DEFAULT_CONFIG_PATH, SimulatorAdmin } from '../../../sim/index.js';
import { BUILTIN_ROLES } from '../../../sim/model/privileges.js';
import { SNAPSHOT_ROLE } from '../../../src/proxmox/index.js';
import type { Plain } from '../../../src/k8s/api.js';
import { csiClient } from '../../helpers/csi-client.js';
import { present } from '../../helpers/present.js';
import { applyAll, isHook, only, render, SEED_VALUES, type K8sObject } from './chart.js';
import { binaries, ROOT, startCluster, type Binaries, type Cluster } from './cluster.js';
import type { Kube } from './kube.js';
import type { Deployment, Event, Node, Pod } from './objects.js';
import { runPod, type ImageCommand, type PodRunOptions, type RunningPod } from './pods.js';
import { startGanesha } from '../../integration/nfs/ganesha.js';

/** The seed's release namespace (the ExternalSecret keeps the Proxmox config Secret there). */
export const NS = 'csi-proxmox';
export const KUBE_VERSION = 'v1.37.2';
export { PROXMOX_DRIVER_NAME as PROXMOX_DRIVER } from '../../../src/proxmox/contract.js';
export { NFS_DRIVER_NAME as NFS_DRIVER } from '../../../src/nfs/contract.js';
export const REGION = 'homelab';

export interface NodeSpec {
  name: string;
  zone: string;
  vmid: number;
  controlPlane?: boolean;
}

/** Four of the seed's VMs (sim/default-cluster.yaml): a control plane and one worker per host. */
export const NODES: NodeSpec[] = [
  { name: 'talos-cp-1', zone: 'hyper1', vmid: 101, controlPlane: true },
  { name: 'talos-worker-1', zone: 'hyper1', vmid: 111 },
  { name: 'talos-worker-2', zone: 'hyper2', vmid: 112 },
  { name: 'talos-worker-3', zone: 'hyper3', vmid: 113 },
];

export interface NfsServer {
  server: string;
  share: string;
  nfsPort: number;
  mountPort: number;
  exportDir: string;
}

/** The parts of the chart values (test/helm/seed-values.yaml) the tier reads or changes. */
export interface TierValues {
  proxmox: { existingConfigSecret: string; existingConfigSecretKey: string };
  nfs: { storageClasses: { parameters: Record<string, string | number | undefined> }[] };
  [key: string]: unknown;
}

export interface Env {
  dir: string;
  bins: Binaries;
  cluster: Cluster;
  kube: Kube;
  pve: Backends;
  sim: SimulatorAdmin;
  nfs: NfsServer;
  values: TierValues;
  rendered: K8sObject[];
  controllerPods: RunningPod[];
  /**
   * What each driver advertises (ControllerGetCapabilities, asked once the first controller pod
   * is ready), by driver name: the snapshot scenarios run for a driver that offers them.
   */
  capabilities: Record<string, string[]>;
  /** The simulator's loop-device links: `<loopLinkDir>/<VM name>/wwn-0x…`, as a node's /dev/disk/by-id. */
  loopLinkDir: string;
  /** Runs the processes of controller pods not running yet (after a scale-up). */
  syncControllerPods(): Promise<RunningPod[]>;
  /** Runs one controller pod's containers here, as its kubelet would, until its driver is ready. */
  runControllerPod(pod: Pod): Promise<RunningPod>;
  /** Recent error lines of every sidecar and the driver, for failure messages. */
  sidecarErrors: () => string;
  stop(ok: boolean): Promise<void>;
}

export function images(bins: Binaries): Record<string, ImageCommand> {
  const version = (p: string) => present(/-(v[\d.]+[^/]*)\//.exec(p)?.[1], `the version in the path ${p}`);
  return {
    'ghcr.io/pve-nfs-csi/pve-nfs-csi': { cmd: [process.execPath, path.join(ROOT, 'dist/src/main.js')] },
    'registry.k8s.io/sig-storage/csi-provisioner': {
      cmd: [bins.CSI_PROVISIONER],
      version: version(bins.CSI_PROVISIONER),
    },
    'registry.k8s.io/sig-storage/csi-attacher': { cmd: [bins.CSI_ATTACHER], version: version(bins.CSI_ATTACHER) },
    'registry.k8s.io/sig-storage/csi-resizer': { cmd: [bins.CSI_RESIZER], version: version(bins.CSI_RESIZER) },
    'registry.k8s.io/sig-storage/csi-snapshotter': {
      cmd: [bins.CSI_SNAPSHOTTER],
      version: version(bins.CSI_SNAPSHOTTER),
    },
  };
}

/**
 * The seed's Proxmox cluster (sim/default-cluster.yaml) with the token's role widened by what
 * snapshots, restores and clones need (docs/snapshots.md, "Privileges"), as a user enabling
 * them grants.
 */
export const SNAPSHOT_PRIVILEGES = [...SNAPSHOT_ROLE.privileges];
function tierCluster(): object {
  const cfg = YAML.parse(fs.readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as {
    tokens: { role?: string; privileges?: string[] }[];
  };
  cfg.tokens = cfg.tokens.map(({ role = 'CSI', ...t }) => ({
    ...t,
    privileges: [...present(BUILTIN_ROLES[role], `the simulator's role ${role}`), ...SNAPSHOT_PRIVILEGES],
  }));
  return cfg;
}

/** The seed's values, with the NAS replaced by the test's ganesha (the one change). */
export function tierValues(nfs: NfsServer): TierValues {
  const values = YAML.parse(fs.readFileSync(SEED_VALUES, 'utf8')) as TierValues;
  for (const sc of values.nfs.storageClasses) {
    sc.parameters.server = nfs.server;
    sc.parameters.share = `${nfs.share}/talos`;
  }
  return values;
}

export function nodeObject(n: NodeSpec): Plain<Lib.V1Node> {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: n.name,
      labels: {
        'kubernetes.io/hostname': n.name,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
        // What Talos sets from talos-cluster.tf (the seed): Proxmox cluster and host.
        'topology.kubernetes.io/region': REGION,
        'topology.kubernetes.io/zone': n.zone,
        ...(n.controlPlane && { 'node-role.kubernetes.io/control-plane': '' }),
      },
      // kubelet's default: the attach/detach controller attaches this node's volumes.
      annotations: { 'volumes.kubernetes.io/controller-managed-attach-detach': 'true' },
    },
    spec: n.controlPlane ? { taints: [{ key: 'node-role.kubernetes.io/control-plane', effect: 'NoSchedule' }] } : {},
  };
}

export async function nodeStatus(kube: Kube, n: NodeSpec): Promise<void> {
  const now = new Date().toISOString();
  const res = { cpu: '4', memory: '8Gi', pods: '110' };
  await kube.patch(`/api/v1/nodes/${n.name}/status`, {
    status: {
      capacity: res,
      allocatable: res,
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'KubeletReady',
          message: 'k8s tier: no kubelet, node declared ready',
          lastHeartbeatTime: now,
          lastTransitionTime: now,
        },
      ],
    },
  });
}

/** The driver's ready line (`{"ready":true,"endpoints":{...}}` on stdout). */
const isReady = (j: { ready?: unknown }) => j.ready === true;

/** A metav1.MicroTime: RFC 3339 with exactly six fractional digits. */
const microTime = () => new Date().toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');

/** Owner references to `node`: what kubelet's objects carry, so they go with the Node. */
const ownedBy = (node: Node) => [{ apiVersion: 'v1', kind: 'Node', name: node.metadata.name, uid: node.metadata.uid }];

/**
 * The kubelet's heartbeat: a Lease named after the node in kube-node-lease, 40 s long, renewed
 * every 10 s (pkg/kubelet/nodelease). The node lifecycle controller reads it; a node whose
 * heartbeat stops is tainted unreachable after --node-monitor-grace-period (50 s).
 */
export async function startHeartbeats(kube: Kube, nodes: NodeSpec[]): Promise<() => void> {
  const path = (n: string) => `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${n}`;
  for (const n of nodes) {
    const node = await kube.get<Node>(`/api/v1/nodes/${n.name}`);
    await kube.create('/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: n.name, ownerReferences: ownedBy(node) },
      spec: { holderIdentity: n.name, leaseDurationSeconds: 40, renewTime: microTime() },
    });
  }
  const timer = setInterval(() => {
    for (const n of nodes) void kube.patch(path(n.name), { spec: { renewTime: microTime() } }).catch(() => undefined);
  }, 10_000);
  timer.unref();
  return () => clearInterval(timer);
}

export async function waitPods(
  kube: Kube,
  ns: string,
  selector: Record<string, string>,
  count: number,
  pred: (p: Pod) => boolean = () => true,
  timeoutMs = 60_000,
): Promise<Pod[]> {
  const sel = Object.entries(selector)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
  const end = Date.now() + timeoutMs;
  for (;;) {
    const pods = (
      await kube.list<Pod>(`/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(sel)}`)
    ).filter((p) => !p.metadata.deletionTimestamp && pred(p));
    if (pods.length >= count) return pods;
    if (Date.now() > end) {
      // What the workload controllers said about it (FailedCreate and the like).
      const events = (await kube.list<Event>(`/api/v1/namespaces/${ns}/events`)).map(
        (e) =>
          `  ${e.involvedObject.kind ?? '?'}/${e.involvedObject.name ?? '?'}: ${e.reason ?? '?'}: ${e.message ?? ''}`,
      );
      throw new Error(
        `timed out waiting for ${count} pods ${sel} in ${ns} (have ${pods.length}); events in ${ns}:\n${events.slice(-20).join('\n') || '  none'}`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * What kubelet does when a node plugin registers (pkg/volume/csi/nodeinfomanager): the CSINode
 * entry from GetPluginInfo + NodeGetInfo, the node id annotation, and the topology labels.
 */
async function registerNodePlugin(kube: Kube, n: NodeSpec, endpoints: string[]): Promise<void> {
  const node = await kube.get<Node>(`/api/v1/nodes/${n.name}`);
  const drivers: Plain<Lib.V1CSINodeDriver>[] = [];
  const ids: Record<string, string> = {};
  const labels: Record<string, string> = {};
  for (const ep of endpoints) {
    const c = csiClient(ep, 20_000);
    try {
      const { name } = await c.identity.GetPluginInfo();
      const info = await c.node.NodeGetInfo();
      const segments: Record<string, string> = info.accessibleTopology?.segments ?? {};
      const max = Number(info.maxVolumesPerNode);
      drivers.push({
        name,
        nodeID: info.nodeId,
        // kubelet leaves the keys out (nil) when the driver reports no topology.
        ...(Object.keys(segments).length > 0 && { topologyKeys: Object.keys(segments).sort() }),
        ...(max > 0 && { allocatable: { count: max } }),
      });
      ids[name] = info.nodeId;
      Object.assign(labels, segments);
    } finally {
      c.close();
    }
  }
  await kube.patch(`/api/v1/nodes/${n.name}`, {
    metadata: { labels, annotations: { 'csi.volume.kubernetes.io/nodeid': JSON.stringify(ids) } },
  });
  await kube.create('/apis/storage.k8s.io/v1/csinodes', {
    apiVersion: 'storage.k8s.io/v1',
    kind: 'CSINode',
    metadata: { name: n.name, ownerReferences: ownedBy(node) },
    spec: { drivers },
  });
}

/** ControllerGetCapabilities of each driver endpoint (driver name -> endpoint), by driver name. */
async function controllerCapabilities(endpoints: Record<string, string>): Promise<Record<string, string[]>> {
  const out: Record<string, string[]> = {};
  for (const [driver, ep] of Object.entries(endpoints)) {
    const c = csiClient(ep, 20_000);
    try {
      const { capabilities } = await c.controller.ControllerGetCapabilities();
      out[driver] = capabilities.flatMap((x) => (x.rpc?.type ? [x.rpc.type] : []));
    } finally {
      c.close();
    }
  }
  return out;
}

/** How the chart gets into the cluster; by default `helm template` + server-side apply. */
export type Install = (ctx: { kube: Kube; cluster: Cluster; dir: string; values: TierValues }) => Promise<K8sObject[]>;

export interface EnvOptions {
  log?: (s: string) => void;
  /** Puts the chart's objects into the cluster and returns them (e.g. `helm install` from a registry). */
  install?: Install;
  /** More images the pods may run (repository:tag or repository -> command), beside the local build. */
  images?: Record<string, ImageCommand>;
}

export async function startEnv(opts: EnvOptions = {}): Promise<Env> {
  const log = opts.log ?? (() => {});
  const t0 = Date.now();
  const step = (s: string) => log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${s}`);
  const bins = binaries();
  step('binaries ready');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pnc-k8s-'));
  const cleanups: (() => Promise<void>)[] = [];
  const podsDir = path.join(dir, 'pods');
  try {
    const cluster = await startCluster(path.join(dir, 'cluster'), bins);
    cleanups.push(() => cluster.stop());
    const kube = cluster.kube;
    if (!cluster.scheduler) throw new Error('kube-scheduler is not running: the tier needs it (KUBE_SCHEDULER)');
    step(`control plane ready at ${cluster.server}`);

    // Loop devices hold each disk's data: what a workload writes through an attached disk is
    // what a snapshot, a restore or a clone must carry (lib/volume-data.ts).
    const pve = await startProxmoxBackend(path.join(dir, 'pve'), { backend: 'loop', config: tierCluster() });
    cleanups.push(() => pve.close());
    const sim = new SimulatorAdmin(present(pve.info.adminUrl, 'the simulator admin URL'));
    const nfs = await startGanesha({ dir: path.join(dir, 'ganesha') });
    cleanups.push(() => nfs.stop());
    step(`simulator ${pve.info.url}, ganesha ${nfs.server}:${nfs.nfsPort}`);

    const values = tierValues(nfs);
    // The tier installs this tree's chart before the VolumeSnapshot CRDs (the snapshot scenarios
    // add them later, to see the sidecar wait for them), so `auto` would render no snapshotter:
    // ask for it. Another install (the release tier's, of older releases too) keeps the values
    // every release's schema takes.
    if (!opts.install)
      for (const key of ['proxmox', 'nfs'] as const)
        (values[key] as Record<string, unknown>)['snapshots'] = { enabled: true };
    await kube.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    // What the seed's ExternalSecret provides: the upstream-format Proxmox config.
    await kube.create(`/api/v1/namespaces/${NS}/secrets`, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: values.proxmox.existingConfigSecret },
      stringData: {
        [values.proxmox.existingConfigSecretKey]: fs.readFileSync(
          present(pve.info.config, "the simulator's driver config"),
          'utf8',
        ),
      },
    });
    const install: Install = async () => {
      const objects = render({ values, namespace: NS, kubeVersion: KUBE_VERSION, dir });
      await applyAll(
        kube,
        objects.filter((o) => !isHook(o)),
        NS,
      );
      return objects;
    };
    const rendered = await (opts.install ?? install)({ kube, cluster, dir, values });
    step(
      `chart applied: ${rendered
        .filter((o) => !isHook(o))
        .map((o) => o.kind)
        .join(', ')}`,
    );

    for (const n of NODES) {
      await kube.create('/api/v1/nodes', nodeObject(n));
      await nodeStatus(kube, n);
    }
    const stopHeartbeats = await startHeartbeats(kube, NODES);
    cleanups.push(async () => stopHeartbeats());
    // The DaemonSet controller makes one node-plugin pod per node. It does so only once the node
    // lifecycle controller has lifted the `node.kubernetes.io/not-ready:NoSchedule` taint that
    // kube-apiserver's TaintNodesByCondition admission puts on every new Node (the chart's
    // tolerations, as the seed sets them, do not cover it), which it does for a Ready node with
    // a live heartbeat: the kubelet's part above. kube-scheduler binds each pod to the node its
    // affinity names; then each pod's driver container runs just long enough to register it as
    // kubelet would.
    const ds = only(rendered, 'DaemonSet');
    const dsLabels = present(ds.spec.selector.matchLabels, 'the DaemonSet selector matchLabels');
    const dsPods = await waitPods(
      kube,
      NS,
      dsLabels,
      NODES.length,
      (p) => !!p.spec.nodeName && (p.metadata.ownerReferences?.some((o) => o.kind === 'DaemonSet') ?? false),
      120_000,
    );
    const imgs = { ...images(bins), ...opts.images };
    /** Runs `pod`'s containers here, as kubelet would on its node. */
    const runHere = (pod: Pod, o: Pick<PodRunOptions, 'only' | 'extraEnv'>) =>
      runPod({ kube, apiPort: cluster.port, ca: cluster.ca, pod, dir: podsDir, images: imgs, ...o });
    /** The driver container of a running pod. */
    const driverIn = (run: RunningPod) => present(run.procs.get('pve-nfs-csi'), `the driver of ${run.name}`);
    await Promise.all(
      NODES.map(async (n) => {
        const pod = dsPods.find((p) => p.spec.nodeName === n.name);
        if (!pod) throw new Error(`the DaemonSet controller made no node-plugin pod for ${n.name}`);
        const run = await runHere(pod, { only: ['pve-nfs-csi'] });
        try {
          const ready = await driverIn(run).readyJson<{ endpoints: Record<string, string> }>(isReady, 60_000);
          await registerNodePlugin(kube, n, Object.values(ready.endpoints));
        } finally {
          await run.stop();
        }
      }),
    );
    step(`nodes registered: ${NODES.map((n) => n.name).join(', ')}`);

    const deploy = only(rendered, 'Deployment');
    const deployLabels = present(deploy.spec.selector.matchLabels, 'the Deployment selector matchLabels');
    const controllerPods: RunningPod[] = [];
    const capabilities: Record<string, string[]> = {};
    const syncControllerPods = async () => {
      const live = await kube.get<Deployment>(`/apis/apps/v1/namespaces/${NS}/deployments/${deploy.metadata.name}`);
      const want = present(live.spec.replicas, 'the Deployment spec.replicas (defaulted by the API server)');
      const pods = await waitPods(kube, NS, deployLabels, want);
      const started: RunningPod[] = [];
      for (const pod of pods) {
        if (controllerPods.some((r) => r.name === pod.metadata.name)) continue;
        started.push(await runControllerPod(pod));
      }
      return started;
    };
    const runControllerPod = async (pod: Pod) => {
      const run = await runHere(pod, {
        // The one addition: where the test's NFS server listens (a NAS answers on 2049).
        extraEnv: { 'pve-nfs-csi': { NFS_PORT: String(nfs.nfsPort), NFS_MOUNT_PORT: String(nfs.mountPort) } },
      });
      controllerPods.push(run);
      const ready = await driverIn(run).readyJson<{ endpoints: Record<string, string> }>(isReady, 60_000);
      if (Object.keys(capabilities).length === 0)
        Object.assign(capabilities, await controllerCapabilities(ready.endpoints));
      return run;
    };
    await syncControllerPods();
    cleanups.push(async () => {
      await Promise.all(controllerPods.map((p) => p.stop()));
    });
    step(
      `controller pod ${controllerPods.map((p) => p.name).join(', ')} running (skipped containers without a local binary: ${[...new Set(controllerPods.flatMap((p) => p.skipped))].join(', ') || 'none'})`,
    );

    const sidecarErrors = () => {
      const out: string[] = [];
      for (const p of controllerPods) {
        for (const [c, proc] of p.procs) {
          const lines = fs.existsSync(proc.logFile) ? fs.readFileSync(proc.logFile, 'utf8').split('\n') : [];
          const bad = lines.filter((l) => /forbidden|\bE\d{4} |"level":(50|60)/i.test(l)).slice(-4);
          for (const l of bad) out.push(`  ${p.name}/${c}: ${l.slice(0, 400)}`);
        }
      }
      return out.length
        ? `recent errors in the controller pods' logs:\n${out.join('\n')}`
        : "no errors in the controller pods' logs";
    };

    return {
      dir,
      bins,
      cluster,
      kube,
      pve,
      sim,
      nfs,
      values,
      rendered,
      controllerPods,
      capabilities,
      loopLinkDir: path.join(dir, 'pve', 'links'),
      syncControllerPods,
      runControllerPod,
      sidecarErrors,
      stop: (ok: boolean) => tearDown({ tier: 'k8s tier', dir, log, cleanups }, ok ? 'passed' : 'failed'),
    };
  } catch (e) {
    await tearDown({ tier: 'k8s tier', dir, log, cleanups }, 'setup failed');
    throw e;
  }
}

/**
 * Stops what a tier's environment started, last first, and removes its logs after a passing run
 * (K8S_KEEP_LOGS=1 keeps every component's log after a passing run too).
 */
export async function tearDown(
  env: { tier: string; dir: string; log: (s: string) => void; cleanups: (() => Promise<void>)[] },
  outcome: 'passed' | 'failed' | 'setup failed',
): Promise<void> {
  for (const c of env.cleanups.reverse()) await c().catch(() => {});
  if (outcome === 'passed' && process.env.K8S_KEEP_LOGS !== '1') fs.rmSync(env.dir, { recursive: true, force: true });
  else env.log(`${env.tier}: ${outcome === 'setup failed' ? 'setup failed; ' : ''}logs kept in ${env.dir}`);
}
