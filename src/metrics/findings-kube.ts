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

/** Items per page: each page is parsed on its own, so no single parse holds the event loop long. */
const PAGE = 500;

/**
 * One list, page by page (limit/continue), each item without what the findings never read
 * (managedFields, the last-applied annotation: most of an object's bytes), so the lists held
 * for a refresh are a fraction of their JSON.
 */
async function list(api: InClusterGet, path: string, signal: AbortSignal): Promise<unknown[]> {
  const items: unknown[] = [];
  let next = '';
  do {
    const page = `${path}?limit=${PAGE}${next ? `&continue=${encodeURIComponent(next)}` : ''}`;
    const r = await api.get(page, signal);
    if (r.status !== 200)
      throw new Unavailable(
        `Kubernetes API at ${api.where}: GET ${page} answered ${r.status}: ${r.text.slice(0, 200)}`,
      );
    const body = jsonBody(r.text, `the list ${path}`, api.where) as {
      items?: Array<{ metadata?: { managedFields?: unknown; annotations?: Record<string, string> } }>;
      metadata?: { continue?: string };
    };
    for (const item of body.items ?? []) {
      if (item.metadata) {
        delete item.metadata.managedFields;
        delete item.metadata.annotations?.[LAST_APPLIED];
      }
      items.push(item);
    }
    next = body.metadata?.continue ?? '';
  } while (next);
  return items;
}

const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';

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
