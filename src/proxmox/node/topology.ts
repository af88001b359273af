// Where this node is, for NodeGetInfo: the Kubernetes Node's labels inside a cluster (the
// in-cluster service account, one plain HTTPS GET; no client library is needed for that), else
// the --region/--zone flags.
import { promises as fs } from 'node:fs';
import https from 'node:https';
import { FailedPrecondition, Unavailable } from '../../errors.js';
import { PROXMOX_NODE_LABEL, PROXMOX_REGION_LABEL, TOPOLOGY_REGION_KEY, TOPOLOGY_ZONE_KEY } from '../contract.js';

export type NodeLabelSource = (nodeName: string, signal?: AbortSignal) => Promise<Record<string, string>>;

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface InClusterOptions {
  env?: NodeJS.ProcessEnv;
  tokenPath?: string;
  caPath?: string;
  timeoutMs?: number;
}

/** A label reader when running in a pod with a service account; undefined outside Kubernetes. */
export async function inClusterNodeLabels(o: InClusterOptions = {}): Promise<NodeLabelSource | undefined> {
  const env = o.env ?? process.env;
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT || '443';
  const tokenPath = o.tokenPath ?? `${SA_DIR}/token`;
  const caPath = o.caPath ?? `${SA_DIR}/ca.crt`;
  if (!host) return undefined;
  try {
    await fs.access(tokenPath);
  } catch {
    return undefined;
  }
  return nodeLabelsFromApi({ host, port: Number(port), tokenPath, caPath, timeoutMs: o.timeoutMs ?? 10_000 });
}

export function nodeLabelsFromApi(o: {
  host: string;
  port: number;
  tokenPath: string;
  caPath: string;
  timeoutMs: number;
}): NodeLabelSource {
  return async (nodeName, signal) => {
    // Re-read both each time: projected service-account tokens are rotated by the kubelet.
    const [token, ca] = await Promise.all([
      fs.readFile(o.tokenPath, 'utf8').then((s) => s.trim()),
      fs.readFile(o.caPath, 'utf8').catch(() => undefined),
    ]);
    const where = `https://${o.host.includes(':') ? `[${o.host}]` : o.host}:${o.port}`;
    const body = await new Promise<string>((resolve, reject) => {
      const req = https.request(
        {
          host: o.host,
          port: o.port,
          method: 'GET',
          path: `/api/v1/nodes/${encodeURIComponent(nodeName)}`,
          headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' },
          ...(ca ? { ca } : {}),
          timeout: o.timeoutMs,
          signal,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            const status = res.statusCode ?? 0;
            if (status === 200) {
              resolve(text);
              return;
            }
            if (status === 404) {
              reject(
                new FailedPrecondition(
                  `Kubernetes has no Node ${JSON.stringify(nodeName)}; --node-id (NODE_NAME) must be the Node's name`,
                ),
              );
              return;
            }
            if (status === 401 || status === 403) {
              reject(
                new FailedPrecondition(
                  `Kubernetes API refused to read Node ${nodeName} (HTTP ${status}); the node plugin's service account needs "get" on nodes`,
                ),
              );
              return;
            }
            reject(
              new Unavailable(
                `Kubernetes API ${where} answered HTTP ${status} for Node ${nodeName}: ${text.slice(0, 200)}`,
              ),
            );
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${o.timeoutMs} ms`)));
      req.on('error', (e) =>
        reject(
          e instanceof FailedPrecondition
            ? e
            : new Unavailable(`cannot read Node ${nodeName} from the Kubernetes API at ${where}: ${e.message}`, {
                cause: e,
              }),
        ),
      );
      req.end();
    });
    let doc: { metadata?: { labels?: Record<string, string> } };
    try {
      doc = JSON.parse(body) as typeof doc;
    } catch {
      throw new Unavailable(`Kubernetes API at ${where} returned a Node that is not JSON`);
    }
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
