// Plain HTTPS calls (GET, merge PATCH, POST) to the Kubernetes API from inside a pod, with the
// pod's service account. For what the CSI server itself reads and writes (the node plugin its
// Node's labels, the controller the Node names for expansion helpers and the Nodes' topology
// labels): serving CSI must not load the client library (start time and memory;
// test/unit/k8s/lazy-import.test.ts), and one call needs none. Callers
// turn the status and body into their own errors: what went wrong means something different to each.
import { existsSync, promises as fs } from 'node:fs';
import https from 'node:https';
import { Unavailable } from '../errors.js';

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface InClusterOptions {
  env?: NodeJS.ProcessEnv;
  tokenPath?: string;
  caPath?: string;
  timeoutMs?: number;
}

export interface ApiServerAt {
  host: string;
  port: number;
  tokenPath: string;
  caPath: string;
  timeoutMs: number;
}

export interface InClusterGet {
  /** `https://host:port`, for messages. */
  readonly where: string;
  /**
   * GETs `path` (e.g. /api/v1/nodes). Resolves with any HTTP answer; rejects only when there was
   * none (connection refused, TLS, timeout, aborted).
   */
  get(path: string, signal?: AbortSignal): Promise<{ status: number; text: string }>;
  /** A JSON merge patch (`application/merge-patch+json`) of `path`; resolves like get. */
  mergePatch(path: string, patch: unknown, signal?: AbortSignal): Promise<{ status: number; text: string }>;
  /** POSTs `body` as JSON (an object to create); resolves like get. */
  post(path: string, body: unknown, signal?: AbortSignal): Promise<{ status: number; text: string }>;
}

/** The API server from the pod's environment and service account; undefined outside Kubernetes. */
export function inClusterApi(o: InClusterOptions = {}): InClusterGet | undefined {
  const env = o.env ?? process.env;
  const host = env.KUBERNETES_SERVICE_HOST;
  const tokenPath = o.tokenPath ?? `${SA_DIR}/token`;
  if (!host || !existsSync(tokenPath)) return undefined;
  return apiServerAt({
    host,
    port: Number(env.KUBERNETES_SERVICE_PORT || '443'),
    tokenPath,
    caPath: o.caPath ?? `${SA_DIR}/ca.crt`,
    timeoutMs: o.timeoutMs ?? 10_000,
  });
}

export function apiServerAt(o: ApiServerAt): InClusterGet {
  const where = `https://${o.host.includes(':') ? `[${o.host}]` : o.host}:${o.port}`;
  const request = async (
    method: 'GET' | 'PATCH' | 'POST',
    path: string,
    body: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<{ status: number; text: string }> => {
    // Re-read both each time: projected service-account tokens are rotated by the kubelet.
    const [token, ca] = await Promise.all([
      fs.readFile(o.tokenPath, 'utf8').then((s) => s.trim()),
      fs.readFile(o.caPath, 'utf8').catch(() => undefined),
    ]);
    return new Promise((resolve, reject) => {
      const req = https.request(
        {
          host: o.host,
          port: o.port,
          method,
          path,
          headers: {
            Authorization: `Bearer ${token}`,
            Accept: 'application/json',
            ...(body !== undefined && {
              'Content-Type': method === 'PATCH' ? 'application/merge-patch+json' : 'application/json',
              'Content-Length': Buffer.byteLength(body),
            }),
          },
          ...(ca ? { ca } : {}),
          timeout: o.timeoutMs,
          ...(signal ? { signal } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') });
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${o.timeoutMs} ms`)));
      req.on('error', reject);
      req.end(body);
    });
  };
  return {
    where,
    get: (path, signal) => request('GET', path, undefined, signal),
    mergePatch: (path, patch, signal) => request('PATCH', path, JSON.stringify(patch), signal),
    post: (path, body, signal) => request('POST', path, JSON.stringify(body), signal),
  };
}

/**
 * An answer's body as JSON. A body that is not JSON (a proxy's HTML page, a cut-off answer) is
 * Unavailable naming `what` and `where`, with the parser's error as its `cause` so the log shows
 * where the body broke.
 */
export function jsonBody(text: string, what: string, where: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new Unavailable(`Kubernetes API at ${where} returned ${what} that is not JSON: ${(e as Error).message}`, {
      cause: e,
    });
  }
}
