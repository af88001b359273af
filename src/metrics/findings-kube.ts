// The Kubernetes objects `report` reads (PVs, claims, VolumeAttachments, StorageClasses), for the
// findings metrics inside the controller pod: four plain GETs with the pod's service account
// (k8s/in-cluster.ts), so serving CSI never loads the Kubernetes client library. The controller's
// ClusterRoles already allow these lists (the provisioner's and attacher's rules).
import type { KubeFacts } from '../cli/report/facts.js';
import { inClusterApi, jsonBody, type InClusterGet } from '../k8s/in-cluster.js';
import { Unavailable } from '../errors.js';

const LISTS = {
  pvs: '/api/v1/persistentvolumes',
  pvcs: '/api/v1/persistentvolumeclaims',
  attachments: '/apis/storage.k8s.io/v1/volumeattachments',
  classes: '/apis/storage.k8s.io/v1/storageclasses',
} as const;

async function list(api: InClusterGet, path: string, signal: AbortSignal): Promise<unknown[]> {
  const r = await api.get(path, signal);
  if (r.status !== 200)
    throw new Unavailable(`Kubernetes API at ${api.where}: GET ${path} answered ${r.status}: ${r.text.slice(0, 200)}`);
  const body = jsonBody(r.text, `the list ${path}`, api.where) as { items?: unknown[] };
  return body.items ?? [];
}

/** The reader in a pod; undefined outside Kubernetes. */
export function inClusterKubeFacts(): ((signal: AbortSignal) => Promise<KubeFacts>) | undefined {
  const api = inClusterApi();
  if (!api) return undefined;
  return async (signal) => {
    const [pvs, pvcs, attachments, classes] = await Promise.all(
      [LISTS.pvs, LISTS.pvcs, LISTS.attachments, LISTS.classes].map((p) => list(api, p, signal)),
    );
    return { pvs, pvcs, attachments, classes } as KubeFacts;
  };
}
