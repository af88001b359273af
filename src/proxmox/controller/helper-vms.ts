// Which VMs an offline expansion may borrow (expand.ts): only the cluster's own node VMs, never
// any VM that happens to run on the disk's host. The names come from, in order:
//   1. the cluster's `expansion_helpers` list in the Proxmox config (our extension), or
//   2. the Kubernetes Nodes, read in-cluster with the controller's service account (the chart
//      grants it list on nodes; a Node's name is its VM's name, as for ControllerPublish), or
//   3. nothing outside Kubernetes without a list: any VM on the host (tests, development), and
//      a warning at start.
import { promises as fs, existsSync } from 'node:fs';
import https from 'node:https';
import { Unavailable } from '../../errors.js';

/** VM names allowed as helpers; undefined = unrestricted. */
export type HelperVmNames = (signal?: AbortSignal) => Promise<ReadonlySet<string> | undefined>;

export function configuredHelpers(names: readonly string[]): HelperVmNames {
  const set = new Set(names);
  return async () => set;
}

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface KubeNodesOptions {
  env?: NodeJS.ProcessEnv;
  tokenPath?: string;
  caPath?: string;
  timeoutMs?: number;
  /** How long one Node list is reused (default 30 s): expansions are rare, Nodes change rarely. */
  ttlMs?: number;
}

/** Node names from the Kubernetes API when running in a pod with a service account; else undefined. */
export function kubernetesNodeNames(o: KubeNodesOptions = {}): HelperVmNames | undefined {
  const env = o.env ?? process.env;
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = Number(env.KUBERNETES_SERVICE_PORT || '443');
  const tokenPath = o.tokenPath ?? `${SA_DIR}/token`;
  const caPath = o.caPath ?? `${SA_DIR}/ca.crt`;
  if (!host || !existsSync(tokenPath)) return undefined;
  const ttlMs = o.ttlMs ?? 30_000;
  const timeoutMs = o.timeoutMs ?? 10_000;
  let cached: { at: number; names: ReadonlySet<string> } | undefined;
  return async (signal) => {
    if (cached && Date.now() - cached.at < ttlMs) return cached.names;
    // Re-read both each time: projected service-account tokens are rotated by the kubelet.
    const [token, ca] = await Promise.all([
      fs.readFile(tokenPath, 'utf8').then((s) => s.trim()),
      fs.readFile(caPath, 'utf8').catch(() => undefined),
    ]);
    const where = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
    const body = await new Promise<string>((resolve, reject) => {
      const req = https.request(
        {
          host,
          port,
          method: 'GET',
          path: '/api/v1/nodes',
          headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' },
          ...(ca ? { ca } : {}),
          timeout: timeoutMs,
          ...(signal ? { signal } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            if (res.statusCode === 200) {
              resolve(text);
              return;
            }
            reject(
              new Unavailable(
                `cannot list Kubernetes Nodes to choose an expansion helper VM (HTTP ${res.statusCode} from ${where}; the controller's ` +
                  `service account needs "list" on nodes): ${text.slice(0, 200)}`,
              ),
            );
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      req.on('error', (e) =>
        reject(
          e instanceof Unavailable
            ? e
            : new Unavailable(`cannot list Kubernetes Nodes at ${where}: ${e.message}`, { cause: e }),
        ),
      );
      req.end();
    });
    let doc: { items?: Array<{ metadata?: { name?: string } }> };
    try {
      doc = JSON.parse(body) as typeof doc;
    } catch {
      throw new Unavailable(`Kubernetes API at ${where} returned a Node list that is not JSON`);
    }
    const names = new Set((doc.items ?? []).map((i) => i.metadata?.name).filter((n): n is string => Boolean(n)));
    cached = { at: Date.now(), names };
    return names;
  };
}
