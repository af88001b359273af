// Workloads for the k8s tier: claims and pods as a user creates them (kube-scheduler places
// them), and the one thing no component does here because there is no kubelet: finishing a
// pod's deletion.
import fs from 'node:fs';
import type * as Lib from '@kubernetes/client-node';
import { Agent, request } from 'undici';
import { readProxmoxConfig } from '../../../src/config/proxmox-file.js';
import type { Plain } from '../../../src/k8s/api.js';
import { present } from '../../helpers/present.js';
import type { Env } from './env.js';
import type { PersistentVolume, PersistentVolumeClaim, Pod, VolumeAttachment } from './objects.js';

export const APPS = 'apps';
export const GiB = 2 ** 30;

/** The head of a core/v1 object of `kind` named `name` in the apps namespace. */
const inApps = (kind: string, name: string) => ({ apiVersion: 'v1', kind, metadata: { name, namespace: APPS } });

/** Fields of a claim's spec beyond class and size (e.g. accessModes). */
export type ClaimSpec = Plain<Lib.V1PersistentVolumeClaimSpec>;

export function pvc(
  name: string,
  storageClassName: string | undefined,
  size: string,
  extra: ClaimSpec = {},
): Plain<Lib.V1PersistentVolumeClaim> {
  return {
    ...inApps('PersistentVolumeClaim', name),
    spec: {
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: size } },
      ...(storageClassName !== undefined && { storageClassName }),
      ...extra,
    },
  };
}

export const pvcPath = (name: string, ns = APPS) => `/api/v1/namespaces/${ns}/persistentvolumeclaims/${name}`;
export const podPath = (name: string, ns = APPS) => `/api/v1/namespaces/${ns}/pods/${name}`;

export async function createPvc(
  env: Env,
  name: string,
  sc: string | undefined,
  size = '1Gi',
  extra: ClaimSpec = {},
): Promise<PersistentVolumeClaim> {
  return env.kube.create<PersistentVolumeClaim>(
    `/api/v1/namespaces/${APPS}/persistentvolumeclaims`,
    pvc(name, sc, size, extra),
  );
}

export async function waitBound(
  env: Env,
  name: string,
  timeoutMs = 60_000,
): Promise<{ pvc: PersistentVolumeClaim; pv: PersistentVolume }> {
  const c = await env.kube.waitFor(
    pvcPath(name),
    (o: PersistentVolumeClaim) => o.status?.phase === 'Bound',
    `PVC ${APPS}/${name} to be Bound`,
    timeoutMs,
    env.sidecarErrors,
  );
  const volumeName = present(c.spec.volumeName, `bound PVC ${APPS}/${name}: spec.volumeName`);
  const pv = await env.kube.get<PersistentVolume>(`/api/v1/persistentvolumes/${volumeName}`);
  return { pvc: c, pv };
}

/** Where a pod may go: a node selector, or node affinity (required and preferred terms). */
export type Placement = Pick<Plain<Lib.V1PodSpec>, 'nodeSelector' | 'affinity'>;

/** A pod using `claims`, placed by kube-scheduler within `placement`. */
function podObject(name: string, claims: string[], placement: Placement): Plain<Lib.V1Pod> {
  return {
    ...inApps('Pod', name),
    spec: {
      ...placement,
      terminationGracePeriodSeconds: 0,
      containers: [
        {
          name: 'app',
          image: 'registry.k8s.io/pause:3.10',
          volumeMounts: claims.map((c, i) => ({ name: `v${i}`, mountPath: `/data${i}` })),
        },
      ],
      volumes: claims.map((c, i) => ({ name: `v${i}`, persistentVolumeClaim: { claimName: c } })),
    },
  };
}

/**
 * A pod using `claims`, scheduled by kube-scheduler within `placement`; resolves once it is
 * bound to a node (for WaitForFirstConsumer claims the scheduler picked the node from the
 * claims' classes, CSIStorageCapacity and topology, and waited for provisioning first).
 */
export async function schedulePod(
  env: Env,
  name: string,
  claims: string[],
  placement: Placement,
  timeoutMs = 90_000,
): Promise<Pod> {
  await env.kube.create(`/api/v1/namespaces/${APPS}/pods`, podObject(name, claims, placement));
  return env.kube.waitFor(
    podPath(name),
    (p: Pod) => !!p.spec.nodeName,
    `pod ${name} to be scheduled`,
    timeoutMs,
    env.sidecarErrors,
  );
}

/** A pod using `claims` on `node` (its nodeSelector names the node; the scheduler does the rest). */
export async function placePod(
  env: Env,
  name: string,
  claims: string[],
  node: string,
  timeoutMs = 90_000,
): Promise<Pod> {
  const pod = await schedulePod(env, name, claims, { nodeSelector: { 'kubernetes.io/hostname': node } }, timeoutMs);
  if (pod.spec.nodeName !== node) throw new Error(`pod ${name} went to ${pod.spec.nodeName ?? '?'}, not ${node}`);
  return pod;
}

/**
 * Deletes a pod for good. A pod bound to a node is only marked for deletion until its kubelet
 * confirms the containers are gone; there is no kubelet, so the test confirms it the way the
 * kubelet finally does: a delete with grace period 0.
 */
export async function deletePod(env: Env, name: string): Promise<void> {
  await env.kube.delete(podPath(name), { gracePeriodSeconds: 0 });
  await env.kube.waitGone(podPath(name), `pod ${name} to be gone`, 30_000);
}

/** The VolumeAttachment of a PV on a node, as the attach/detach controller names it (any name). */
export async function attachmentOf(env: Env, pvName: string, node: string): Promise<VolumeAttachment | undefined> {
  const vas = await env.kube.list<VolumeAttachment>('/apis/storage.k8s.io/v1/volumeattachments');
  return vas.find((v) => v.spec.source.persistentVolumeName === pvName && v.spec.nodeName === node);
}

/** Read-only view of the simulated Proxmox API, as the driver sees it (token auth, TLS). */
export class Pve {
  private readonly agent: Agent;
  private readonly auth: string;
  constructor(
    readonly url: string,
    configFile: string,
  ) {
    const cfg = present(readProxmoxConfig(configFile).clusters[0], `a cluster in ${configFile}`);
    const ca = present(cfg.caFile, `ca_file in ${configFile}`);
    this.agent = new Agent({ connect: { ca: fs.readFileSync(ca, 'utf8') } });
    this.auth = `PVEAPIToken=${present(cfg.tokenId, `token_id in ${configFile}`)}=${present(cfg.tokenSecret, `token_secret in ${configFile}`)}`;
  }
  /** The answer's `data` as T: the caller names the type the Proxmox API documents for `p`. */
  async get<T>(p: string): Promise<T> {
    const res = await request(`${this.url.replace(/\/$/, '')}${p}`, {
      dispatcher: this.agent,
      headers: { authorization: this.auth },
    });
    const j = (await res.body.json()) as { data: T };
    if (res.statusCode !== 200) throw new Error(`Proxmox GET ${p}: ${res.statusCode} ${JSON.stringify(j)}`);
    return j.data;
  }
  /** Disks on a host's storage: volid -> size in bytes. */
  async disks(host: string, storage = 'local-lvm'): Promise<Map<string, number>> {
    const list = await this.get<{ volid: string; size: number }[]>(`/nodes/${host}/storage/${storage}/content`);
    return new Map(list.map((e) => [e.volid, e.size]));
  }
  /** A VM's config: scsiN -> drive string (and the numeric keys: memory, cores, ...). */
  async vmConfig(host: string, vmid: number): Promise<Record<string, string | number>> {
    return this.get<Record<string, string | number>>(`/nodes/${host}/qemu/${vmid}/config`);
  }
  close(): Promise<void> {
    return this.agent.close();
  }
}
