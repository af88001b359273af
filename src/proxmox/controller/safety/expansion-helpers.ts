// Which VMs an offline expansion may borrow (expand.ts): only the cluster's own node VMs, never
// any VM that happens to run on the disk's host. The names come from, in order:
//   1. the cluster's `expansion_helpers` list in the Proxmox config (our extension), or
//   2. the Kubernetes Nodes, read in-cluster with the controller's service account (the chart
//      grants it list on nodes; a Node's name is its VM's name, as for ControllerPublish), or
//   3. nothing outside Kubernetes without a list: any VM on the host (tests, development), and
//      a warning at start.
import { Unavailable } from '../../../errors.js';
import { inClusterApi, jsonBody, type InClusterOptions } from '../../../k8s/in-cluster.js';

/** VM names allowed as helpers; undefined = unrestricted. */
export type HelperVmNames = (signal?: AbortSignal) => Promise<ReadonlySet<string> | undefined>;

export function configuredHelpers(names: readonly string[]): HelperVmNames {
  const set = new Set(names);
  return async () => set;
}

export interface KubeNodesOptions extends InClusterOptions {
  /** How long one Node list is reused (default 30 s): expansions are rare, Nodes change rarely. */
  ttlMs?: number;
}

/** Node names from the Kubernetes API when running in a pod with a service account; else undefined. */
export function kubernetesNodeNames(o: KubeNodesOptions = {}): HelperVmNames | undefined {
  const api = inClusterApi(o);
  if (!api) return undefined;
  const ttlMs = o.ttlMs ?? 30_000;
  let cached: { at: number; names: ReadonlySet<string> } | undefined;
  return async (signal) => {
    if (cached && Date.now() - cached.at < ttlMs) return cached.names;
    let r: { status: number; text: string };
    try {
      r = await api.get('/api/v1/nodes', signal);
    } catch (e) {
      throw new Unavailable(`cannot list Kubernetes Nodes at ${api.where}: ${(e as Error).message}`, { cause: e });
    }
    if (r.status !== 200)
      throw new Unavailable(
        `cannot list Kubernetes Nodes to choose an expansion helper VM (HTTP ${r.status} from ${api.where}; the controller's ` +
          `service account needs "list" on nodes): ${r.text.slice(0, 200)}`,
      );
    const doc = jsonBody(r.text, 'a Node list', api.where) as { items?: Array<{ metadata?: { name?: string } }> };
    const names = new Set((doc.items ?? []).map((i) => i.metadata?.name).filter((n): n is string => Boolean(n)));
    cached = { at: Date.now(), names };
    return names;
  };
}
