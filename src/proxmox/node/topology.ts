// Where this node is, for NodeGetInfo: the Kubernetes Node's labels inside a cluster (the
// in-cluster service account, one plain HTTPS GET; no client library is needed for that), else
// the --region/--zone flags.
import { FailedPrecondition, Unavailable } from '../../errors.js';
import {
  apiServerAt,
  inClusterApi,
  jsonBody,
  type ApiServerAt,
  type InClusterGet,
  type InClusterOptions,
} from '../../k8s/in-cluster.js';
import { PROXMOX_NODE_LABEL, PROXMOX_REGION_LABEL, TOPOLOGY_REGION_KEY, TOPOLOGY_ZONE_KEY } from '../contract.js';

export type NodeLabelSource = (nodeName: string, signal?: AbortSignal) => Promise<Record<string, string>>;

/** A label reader when running in a pod with a service account; undefined outside Kubernetes. */
export async function inClusterNodeLabels(o: InClusterOptions = {}): Promise<NodeLabelSource | undefined> {
  const api = inClusterApi(o);
  return api && nodeLabelsFrom(api);
}

export function nodeLabelsFromApi(o: ApiServerAt): NodeLabelSource {
  return nodeLabelsFrom(apiServerAt(o));
}

function nodeLabelsFrom(api: InClusterGet): NodeLabelSource {
  return async (nodeName, signal) => {
    let r: { status: number; text: string };
    try {
      r = await api.get(`/api/v1/nodes/${encodeURIComponent(nodeName)}`, signal);
    } catch (e) {
      throw new Unavailable(
        `cannot read Node ${nodeName} from the Kubernetes API at ${api.where}: ${(e as Error).message}`,
        { cause: e },
      );
    }
    if (r.status === 404)
      throw new FailedPrecondition(
        `Kubernetes has no Node ${JSON.stringify(nodeName)}; --node-id (NODE_NAME) must be the Node's name`,
      );
    if (r.status === 401 || r.status === 403)
      throw new FailedPrecondition(
        `Kubernetes API refused to read Node ${nodeName} (HTTP ${r.status}); the node plugin's service account needs "get" on nodes`,
      );
    if (r.status !== 200)
      throw new Unavailable(
        `Kubernetes API ${api.where} answered HTTP ${r.status} for Node ${nodeName}: ${r.text.slice(0, 200)}`,
      );
    const doc = jsonBody(r.text, 'a Node', api.where) as { metadata?: { labels?: Record<string, string> } };
    return doc.metadata?.labels ?? {};
  };
}

export interface TopologyInput {
  nodeId: string;
  /** Flag/env values; used outside a cluster, and inside one when a label is missing. */
  region?: string | undefined;
  zone?: string | undefined;
  labels?: NodeLabelSource | undefined;
  signal?: AbortSignal | undefined;
}

export async function resolveTopology(i: TopologyInput): Promise<{ region: string; zone: string }> {
  let region = '';
  let zone = '';
  if (i.labels) {
    const l = await i.labels(i.nodeId, i.signal);
    region = l[PROXMOX_REGION_LABEL] || l[TOPOLOGY_REGION_KEY] || '';
    zone = l[PROXMOX_NODE_LABEL] || l[TOPOLOGY_ZONE_KEY] || '';
  }
  region ||= i.region ?? '';
  zone ||= i.zone ?? '';
  if (!region || !zone) {
    const missing = [!region && 'region', !zone && 'zone'].filter(Boolean).join(' and ');
    throw new FailedPrecondition(
      i.labels
        ? `Node ${i.nodeId} has no ${missing}: set the label ${!region ? TOPOLOGY_REGION_KEY : ''}${!region && !zone ? ' and ' : ''}${!zone ? TOPOLOGY_ZONE_KEY : ''} (Proxmox cluster name / host name), or pass --region/--zone`
        : `node ${i.nodeId} has no ${missing}: pass --region and --zone (CSI_REGION/CSI_ZONE) outside Kubernetes`,
    );
  }
  return { region, zone };
}
