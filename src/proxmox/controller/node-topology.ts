// Keeps each Kubernetes Node's topology labels (topology.kubernetes.io/region and zone) where
// Proxmox says the Node's VM runs, so a cluster needs neither the Proxmox cloud controller manager
// nor hand-set labels, and a VM migrated to another host is relabelled on the next pass (the
// scheduler then places its new claims on that host; its zone-bound volumes stay where they are).
// When a Node's zone changes, a Warning Event on the Node says so: pods there can no longer use
// the Proxmox volumes of its old host, which stay where they are.
// A Node is matched to a VM the way attach matches a node id (state/vm-locator.ts): its
// providerID `proxmox://<region>/<vmid>`, else its name. A Node carrying the override labels
// topology.proxmox.sinextra.dev/region|node was placed by hand and is left alone.
import type { Logger } from 'pino';
import { jsonBody, type InClusterGet } from '../../k8s/in-cluster.js';
import { PROXMOX_NODE_LABEL, PROXMOX_REGION_LABEL, TOPOLOGY_REGION_KEY, TOPOLOGY_ZONE_KEY } from '../contract.js';
import type { VmRef } from './state/vm-locator.js';

export interface NodeFacts {
  name: string;
  uid?: string | undefined;
  providerID?: string | undefined;
  labels: Record<string, string>;
}

/** Resolves a node id to its VM in one Proxmox cluster (region); undefined when it has none. */
export type LocateVm = (nodeId: string, signal?: AbortSignal) => Promise<VmRef | undefined>;

export interface NodeTopologyDeps {
  kube: InClusterGet;
  /** region → that cluster's VM locator. */
  clusters: ReadonlyMap<string, LocateVm>;
  log: Logger;
}

/** The label changes one Node needs (undefined: none), given where its VM runs. */
export function topologyPatch(
  node: NodeFacts,
  placed: { region: string; zone: string } | undefined,
): Record<string, string> | undefined {
  if (!placed) return undefined;
  if (node.labels[PROXMOX_REGION_LABEL] !== undefined || node.labels[PROXMOX_NODE_LABEL] !== undefined)
    return undefined;
  const want = { [TOPOLOGY_REGION_KEY]: placed.region, [TOPOLOGY_ZONE_KEY]: placed.zone };
  const changes = Object.entries(want).filter(([k, v]) => node.labels[k] !== v);
  return changes.length > 0 ? Object.fromEntries(changes) : undefined;
}

async function placement(
  node: NodeFacts,
  clusters: NodeTopologyDeps['clusters'],
  signal: AbortSignal | undefined,
): Promise<{ region: string; zone: string } | undefined> {
  const id = node.providerID?.startsWith('proxmox://') ? node.providerID : node.name;
  for (const [region, locate] of clusters) {
    const vm = await locate(id, signal);
    if (vm) return { region, zone: vm.node };
  }
  return undefined;
}

export interface SyncResult {
  /** Node name → the labels set on it. */
  labelled: Map<string, Record<string, string>>;
  /** Nodes whose VM no configured cluster has. */
  unplaced: string[];
}

/** One pass over every Node. A Node that cannot be read or patched is logged and skipped. */
export async function syncNodeTopology(deps: NodeTopologyDeps, signal?: AbortSignal): Promise<SyncResult> {
  const r = await deps.kube.get('/api/v1/nodes', signal);
  if (r.status !== 200)
    throw new Error(
      `cannot list Nodes at ${deps.kube.where} (HTTP ${r.status}; the controller's service account needs "list" on nodes): ${r.text.slice(0, 200)}`,
    );
  const doc = jsonBody(r.text, 'a Node list', deps.kube.where) as {
    items?: {
      metadata?: { name?: string; uid?: string; labels?: Record<string, string> };
      spec?: { providerID?: string };
    }[];
  };
  const result: SyncResult = { labelled: new Map(), unplaced: [] };
  for (const item of doc.items ?? []) {
    const name = item.metadata?.name;
    if (!name) continue;
    const node: NodeFacts = {
      name,
      uid: item.metadata?.uid,
      providerID: item.spec?.providerID,
      labels: item.metadata?.labels ?? {},
    };
    const placed = await placement(node, deps.clusters, signal);
    if (!placed) {
      result.unplaced.push(name);
      continue;
    }
    const patch = topologyPatch(node, placed);
    if (!patch) continue;
    const p = await deps.kube.mergePatch(
      `/api/v1/nodes/${encodeURIComponent(name)}`,
      { metadata: { labels: patch } },
      signal,
    );
    if (p.status !== 200) {
      deps.log.warn(
        { node: name, status: p.status, body: p.text.slice(0, 200) },
        'cannot set the Node topology labels (the controller service account needs "patch" on nodes)',
      );
      continue;
    }
    const before = node.labels[TOPOLOGY_ZONE_KEY];
    if (before && before !== placed.zone) {
      const message = `the VM of Node ${name} now runs on Proxmox host ${placed.zone} (was ${before}); its ${TOPOLOGY_ZONE_KEY} label follows. Volumes of csi.proxmox.sinextra.dev on ${before} stay there and can no longer attach to this Node: move them (pve-nfs-csi move) or migrate the VM back`;
      deps.log.warn({ node: name, labels: patch }, message);
      await migratedEvent(deps, node, message, signal);
    } else deps.log.info({ node: name, labels: patch }, `Node ${name}: topology labels set from its VM's host`);
    result.labelled.set(name, patch);
  }
  return result;
}

/** A Warning Event on the Node (in `default`, where Node events live); a failure is only logged. */
async function migratedEvent(
  deps: NodeTopologyDeps,
  node: NodeFacts,
  message: string,
  signal: AbortSignal | undefined,
): Promise<void> {
  const now = new Date().toISOString();
  const event = {
    metadata: { generateName: `${node.name}.`, namespace: 'default' },
    involvedObject: { apiVersion: 'v1', kind: 'Node', name: node.name, ...(node.uid && { uid: node.uid }) },
    reason: 'VMMovedAwayFromZone',
    type: 'Warning',
    message,
    source: { component: 'pve-nfs-csi-controller' },
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  };
  const r = await deps.kube.post('/api/v1/namespaces/default/events', event, signal).catch((e: unknown) => ({
    status: 0,
    text: (e as Error).message,
  }));
  if (r.status !== 201 && r.status !== 200)
    deps.log.warn({ node: node.name, status: r.status, body: r.text.slice(0, 200) }, 'cannot record the Node Event');
}

/** Runs syncNodeTopology now and every `intervalMs`; a failed pass is logged, the next one tries again. */
export function startNodeTopologyLabels(deps: NodeTopologyDeps, intervalMs = 60_000): { stop(): void } {
  const ac = new AbortController();
  let running = false;
  const pass = async () => {
    if (running) return;
    running = true;
    try {
      await syncNodeTopology(deps, ac.signal);
    } catch (e) {
      if (!ac.signal.aborted) deps.log.warn({ err: e }, 'Node topology labels: pass failed; retrying next interval');
    } finally {
      running = false;
    }
  };
  void pass();
  const timer = setInterval(() => void pass(), intervalMs);
  timer.unref();
  return {
    stop() {
      clearInterval(timer);
      ac.abort();
    },
  };
}
