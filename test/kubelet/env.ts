// The kubelet tier's environment: the k8s tier's control plane on the host with kube-scheduler,
// one real node in the QEMU guest (kubelet, containerd, runc, CNI: ./node.ts) named
// talos-worker-1 in zone hyper1, the chart rendered with the seed's values and applied, its node
// DaemonSet run by that kubelet as real containers, and its controller Deployment run on the
// host as the k8s tier runs it (local processes, ../k8s/lib/pods.ts) on a control-plane Node
// that has no kubelet (the k8s tier's declared-ready Node with heartbeats). Disks: the simulator
// hot-plugs them into the guest over QMP. NFS: the guest's kernel nfsd. The chart and the node
// plugin's image are the release this tree builds, as a user gets them: test/kubelet/tier.sh
// pushed both to the release tier's registry, the chart is rendered from oci:// and the guest's
// containerd pulls the image from there (TLS with the test CA).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { startProxmoxBackend, type Backends } from '../harness/backends.js';
import { SimulatorAdmin } from '../../sim/index.js';
import { present } from '../helpers/present.js';
import { applyAll, isHook, only, render, type K8sObject } from '../k8s/lib/chart.js';
import { binaries, ROOT, startCluster, type Cluster } from '../k8s/lib/cluster.js';
import {
  images as hostImages,
  KUBE_VERSION,
  nodeObject,
  nodeStatus,
  NS,
  REGION,
  startHeartbeats,
  tearDown,
  tierValues,
  waitPods,
  type NodeSpec,
  type TierValues,
} from '../k8s/lib/env.js';
import type { Kube } from '../k8s/lib/kube.js';
import type { CSINode, Pod } from '../k8s/lib/objects.js';
import { runPod, type RunningPod } from '../k8s/lib/pods.js';
import { registry, release, type Registry, type Release } from '../release/lib/release.js';
import { nodeBinaries, startKubeletNode, type KubeletNode } from './node.js';

/** The guest plays talos-worker-1 (VMID 111 on hyper1 in sim/default-cluster.yaml). */
export const WORKER: NodeSpec = { name: 'talos-worker-1', zone: 'hyper1', vmid: 111 };
/** The control plane the controller Deployment's nodeSelector picks; no kubelet behind it. */
export const CONTROL_PLANE: NodeSpec = { name: 'talos-cp-1', zone: 'hyper1', vmid: 101, controlPlane: true };
/** The guest's NFS tree (test/vm/guest-init.sh): v3 export and v4 path of the NAS share. */
export const GUEST_SHARE = '/volume1/k8s-volumes';
/** Where that share is in the guest's own filesystem. */
export const GUEST_SHARE_DIR = `/srv/nas${GUEST_SHARE}`;
/**
 * The Proxmox driver's volume limit on the node (chart node.maxVolumesPerNode, reported by
 * NodeGetInfo): low enough that the volume-limit scenario fills it under TCG, high enough for
 * the most any other scenario holds at once (the kubelet restart: two).
 */
export const NODE_VOLUME_LIMIT = 3;

/** More kube-controller-manager controllers a real node's pods need (projected token volumes). */
const NODE_CONTROLLERS = ['root-ca-certificate-publisher-controller', 'pod-garbage-collector-controller'];

export interface KubeletEnv {
  dir: string;
  cluster: Cluster;
  kube: Kube;
  node: KubeletNode;
  pve: Backends;
  sim: SimulatorAdmin;
  values: TierValues;
  rendered: K8sObject[];
  /** What the guest's containerd has (pause, registrar, workload) or pulls (driver). */
  images: NodeImages;
  /** The release the chart and the driver image come from, and its registry. */
  release: Release;
  registry: Registry;
  controllerPods: RunningPod[];
  timings: Record<string, number>;
  stop(ok: boolean): Promise<void>;
}

export interface NodeImages {
  /** Image reference → OCI archive, unpacked into the node's containerd before it starts. */
  archives: Record<string, string>;
  pause: string;
  registrar: string;
  workload: string;
  /** The release's image in the registry: pulled by the node's containerd. */
  driver: string;
}

/**
 * The images the node has from the start, from scripts/lib/kubelet-images.sh: NAME=archive and
 * NAME_REF=reference lines for PAUSE, REGISTRAR and WORKLOAD; the driver is the release's.
 */
export function nodeImages(driver: string): NodeImages {
  const names = ['PAUSE', 'REGISTRAR', 'WORKLOAD'];
  const out = execFileSync(
    'bash',
    [path.join(ROOT, 'scripts/lib/kubelet-images.sh'), ...names.map((n) => n.toLowerCase())],
    {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const kv = new Map(
    out
      .trim()
      .split('\n')
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)] as const),
  );
  const ref = (n: string) => present(kv.get(`${n}_REF`), `kubelet-images.sh printed no ${n}_REF`);
  return {
    archives: Object.fromEntries(names.map((n) => [ref(n), present(kv.get(n), `kubelet-images.sh printed no ${n}`)])),
    pause: ref('PAUSE'),
    registrar: ref('REGISTRAR'),
    workload: ref('WORKLOAD'),
    driver,
  };
}

export async function startKubeletEnv(log: (s: string) => void): Promise<KubeletEnv> {
  const t0 = Date.now();
  const timings: Record<string, number> = {};
  const step = (s: string) => log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${s}`);
  const bins = binaries();
  const nodeBins = nodeBinaries();
  const reg = registry();
  const rel = release(present(process.env.KUBELET_RELEASE_DIR, 'KUBELET_RELEASE_DIR (set by test/kubelet/tier.sh)'));
  const images = nodeImages(rel.image);
  step(`binaries and images ready: ${Object.keys(images.archives).join(', ')}; ${rel.image} in the registry`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pnc-kubelet-'));
  const logDir = path.join(dir, 'logs');
  const cleanups: (() => Promise<void>)[] = [];
  try {
    const cluster = await startCluster(path.join(dir, 'cluster'), bins, {
      nodes: [WORKER.name],
      controllers: NODE_CONTROLLERS,
    });
    cleanups.push(() => cluster.stop());
    const kube = cluster.kube;
    step(`control plane with kube-scheduler at ${cluster.server}`);

    // The control plane Node (no kubelet: declared Ready, heartbeats from here).
    await kube.create('/api/v1/nodes', nodeObject(CONTROL_PLANE));
    await nodeStatus(kube, CONTROL_PLANE);
    const stopHeartbeats = await startHeartbeats(kube, [CONTROL_PLANE]);
    cleanups.push(async () => stopHeartbeats());

    const node = await startKubeletNode({
      cluster,
      bins: nodeBins,
      name: WORKER.name,
      labels: { 'topology.kubernetes.io/region': REGION, 'topology.kubernetes.io/zone': WORKER.zone },
      images: images.archives,
      sandboxImage: images.pause,
      registry: {
        host: reg.host,
        ca: fs.readFileSync(reg.ca, 'utf8'),
        guestIp: present(
          process.env.KUBELET_REGISTRY_GUEST_IP,
          'KUBELET_REGISTRY_GUEST_IP (set by test/kubelet/tier.sh)',
        ),
      },
      logDir,
      log: step,
    });
    cleanups.push(() => node.stop());
    timings.nodeReadySeconds = node.readySeconds;

    const pve = await startProxmoxBackend(path.join(dir, 'pve'), {
      backend: 'qmp',
      qmp: { [WORKER.vmid]: node.guest.qmpSocket },
    });
    cleanups.push(() => pve.close());
    const sim = new SimulatorAdmin(present(pve.info.adminUrl, 'the simulator admin URL'));

    const values = tierValues({ server: '127.0.0.1', share: GUEST_SHARE, nfsPort: 0, mountPort: 0, exportDir: '' });
    // The scenarios' own settings on top of the seed's values: a volume limit the node can
    // reach, and inline NFS volumes for the Pod Security restricted case.
    const nodeValues = (values['node'] ??= {}) as Record<string, unknown>;
    nodeValues['maxVolumesPerNode'] = NODE_VOLUME_LIMIT;
    // The control-plane Node is a stand-in with no kubelet (the controller's pod runs on the host):
    // a node plugin pod placed there would never run, and a rolling update of the DaemonSet,
    // counting it as the one pod allowed to be unavailable, would never replace the worker's. On
    // a real cluster that node runs one; here the DaemonSet keeps to the nodes with a kubelet.
    nodeValues['affinity'] = {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [
            { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'NotIn', values: [CONTROL_PLANE.name] }] },
          ],
        },
      },
    };
    (values['nfs'] as Record<string, unknown>)['enableInlineVolume'] = true;
    await kube.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
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
    // The chart as a user installs it: from the registry, the image pinned to the release.
    const rendered = render({
      values,
      namespace: NS,
      kubeVersion: KUBE_VERSION,
      dir,
      chart: rel.chartRef,
      chartArgs: ['--version', rel.version, '--ca-file', reg.ca],
    });
    const dsImage = only(rendered, 'DaemonSet').spec.template.spec?.containers.find(
      (c) => c.name === 'pve-nfs-csi',
    )?.image;
    if (dsImage !== rel.image)
      throw new Error(`the release chart's DaemonSet runs ${String(dsImage)}, not ${rel.image}`);
    await applyAll(
      kube,
      rendered.filter((o) => !isHook(o)),
      NS,
    );
    step('chart applied');

    // The controller pod, placed by kube-scheduler on the control plane, runs here.
    const deploy = only(rendered, 'Deployment');
    const [ctrlPod] = await waitPods(
      kube,
      NS,
      present(deploy.spec.selector.matchLabels, 'the Deployment selector'),
      1,
      (p) => p.spec.nodeName === CONTROL_PLANE.name,
      120_000,
    );
    const run = await runPod({
      kube,
      apiPort: cluster.port,
      ca: cluster.ca,
      pod: present(ctrlPod, 'the controller pod'),
      dir: path.join(dir, 'pods'),
      // The controller runs this tree's build on the host, whatever repository the chart names.
      images: {
        ...hostImages(bins),
        [rel.repository]: present(hostImages(bins)['ghcr.io/pve-nfs-csi/pve-nfs-csi'], 'the driver command'),
      },
      extraEnv: {
        'pve-nfs-csi': { NFS_PORT: String(node.guest.nfsPort), NFS_MOUNT_PORT: String(node.guest.nfsMountPort) },
      },
    });
    const controllerPods = [run];
    cleanups.push(() => run.stop());
    step(`controller pod ${run.name} running on the host`);

    // The node pod: real containers in the guest; kubelet registers both drivers.
    const drivers = rendered.filter((o) => o.kind === 'CSIDriver').map((o) => o.metadata.name);
    await kube.waitFor<CSINode>(
      `/apis/storage.k8s.io/v1/csinodes/${WORKER.name}`,
      (c) => drivers.every((d) => csiDrivers(c).some((x) => x.name === d)),
      `CSINode ${WORKER.name} with drivers ${drivers.join(', ')}`,
      // The node plugin's image is pulled from the registry first (unpacked under TCG).
      900_000,
      () => nodePodState(kube),
    );
    timings.csiNodeSeconds = (Date.now() - t0) / 1000;
    const pulled = (await kube.list<{ reason?: string; message?: string }>(`/api/v1/namespaces/${NS}/events`)).filter(
      (e) => e.reason === 'Pulled' && e.message?.includes(rel.image),
    );
    step(`kubelet: ${pulled.map((e) => e.message).join('; ') || `no Pulled event for ${rel.image}`}`);
    step(`CSINode ${WORKER.name} has ${drivers.join(', ')}`);

    return {
      dir,
      cluster,
      kube,
      node,
      pve,
      sim,
      values,
      rendered,
      images,
      release: rel,
      registry: reg,
      controllerPods,
      timings,
      stop: (ok: boolean) => tearDown({ tier: 'kubelet tier', dir, log, cleanups }, ok ? 'passed' : 'failed'),
    };
  } catch (e) {
    await tearDown({ tier: 'kubelet tier', dir, log, cleanups }, 'setup failed');
    throw e;
  }
}

/** A CSINode's drivers: kubelet creates the object with `drivers: null` before any registers. */
export function csiDrivers(c: CSINode): CSINode['spec']['drivers'] {
  const { drivers } = c.spec as { drivers: CSINode['spec']['drivers'] | null };
  return drivers ?? [];
}

/** The node plugin pod's container states, for a failure message. */
export async function nodePodState(kube: Kube): Promise<string> {
  const pods = await kube.list<Pod>(`/api/v1/namespaces/${NS}/pods?fieldSelector=spec.nodeName=${WORKER.name}`);
  return pods
    .map(
      (p) =>
        `${p.metadata.name}: ${p.status?.phase ?? '?'} ${(p.status?.containerStatuses ?? [])
          .map((c) => `${c.name}=${JSON.stringify(c.state)}`)
          .join(' ')}`,
    )
    .join('\n');
}
