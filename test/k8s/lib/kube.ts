// A small Kubernetes REST client for the k8s tier: plain HTTPS + JSON against the real
// kube-apiserver, bearer-token auth, and server-side apply. Enough for what the tests do;
// everything else (binding, attaching, resizing) is done by the real components.
import { Agent, request } from 'undici';

/** What an error answer says: a Status object's message, else the start of the body. */
function describeBody(body: unknown): string {
  if (typeof body === 'object' && body !== null && 'message' in body && typeof body.message === 'string')
    return body.message;
  return body === undefined ? '(no body)' : JSON.stringify(body).slice(0, 300);
}

export class KubeError extends Error {
  constructor(
    readonly status: number,
    readonly method: string,
    readonly path: string,
    readonly body: unknown,
  ) {
    super(`${method} ${path}: HTTP ${status} ${describeBody(body)}`);
  }
}

/** What server-side apply and discovery need of an object. */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name?: string; namespace?: string };
}

export interface ResourceInfo {
  /** e.g. /apis/storage.k8s.io/v1 */
  base: string;
  /** plural resource name, e.g. storageclasses */
  name: string;
  namespaced: boolean;
}

export class Kube {
  private readonly agent: Agent;
  private readonly discovery = new Map<string, Promise<Map<string, ResourceInfo>>>();

  constructor(
    readonly server: string,
    private readonly token: string,
    readonly ca: string,
  ) {
    this.agent = new Agent({ connect: { ca }, connections: 16 });
  }

  /** Another identity on the same server (e.g. a ServiceAccount token). */
  as(token: string): Kube {
    return new Kube(this.server, token, this.ca);
  }

  /** The answer's JSON as T: the caller names the type the API documents for `path`. */
  async req<T = unknown>(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<T> {
    const res = await request(this.server + path, {
      method: method as never,
      dispatcher: this.agent,
      headers: {
        authorization: `Bearer ${this.token}`,
        accept: 'application/json',
        ...(body !== undefined && { 'content-type': contentType }),
      },
      ...(body !== undefined && { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    });
    const text = await res.body.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = text;
    }
    if (res.statusCode >= 300) throw new KubeError(res.statusCode, method, path, json);
    return json as T;
  }

  get<T = unknown>(path: string): Promise<T> {
    return this.req<T>('GET', path);
  }
  /** undefined when the object does not exist. */
  async tryGet<T = unknown>(path: string): Promise<T | undefined> {
    try {
      return await this.get<T>(path);
    } catch (e) {
      if (e instanceof KubeError && e.status === 404) return undefined;
      throw e;
    }
  }
  async list<T = unknown>(path: string): Promise<T[]> {
    return (await this.get<{ items: T[] }>(path)).items;
  }
  create<T = unknown>(path: string, obj: unknown): Promise<T> {
    return this.req<T>('POST', path, obj);
  }
  /** JSON merge patch (or strategic merge for `strategic`). */
  patch<T = unknown>(path: string, patch: unknown, kind: 'merge' | 'strategic' | 'json' = 'merge'): Promise<T> {
    const ct = {
      merge: 'application/merge-patch+json',
      strategic: 'application/strategic-merge-patch+json',
      json: 'application/json-patch+json',
    }[kind];
    return this.req<T>('PATCH', path, patch, ct);
  }
  async delete(path: string, opts: Record<string, unknown> = {}): Promise<void> {
    try {
      await this.req('DELETE', path, { kind: 'DeleteOptions', apiVersion: 'v1', ...opts });
    } catch (e) {
      if (!(e instanceof KubeError && e.status === 404)) throw e;
    }
  }

  /** Resource path of an object from its apiVersion/kind, found through API discovery. */
  async pathOf(obj: KubeObject, namespace?: string): Promise<string> {
    const base = obj.apiVersion.includes('/') ? `/apis/${obj.apiVersion}` : `/api/${obj.apiVersion}`;
    let kinds = this.discovery.get(base);
    if (!kinds) {
      kinds = this.get<{ resources: { name: string; kind: string; namespaced: boolean }[] }>(base).then(
        (d) =>
          new Map(
            d.resources
              .filter((r) => !r.name.includes('/'))
              .map((r) => [r.kind, { base, name: r.name, namespaced: r.namespaced }]),
          ),
      );
      this.discovery.set(base, kinds);
    }
    const info = (await kinds).get(obj.kind);
    if (!info) throw new Error(`the API server does not serve kind ${obj.kind} in ${obj.apiVersion}`);
    const ns = obj.metadata.namespace ?? namespace;
    if (info.namespaced && !ns) throw new Error(`${obj.kind} ${obj.metadata.name} is namespaced but has no namespace`);
    return `${info.base}${info.namespaced ? `/namespaces/${ns}` : ''}/${info.name}${obj.metadata.name ? `/${obj.metadata.name}` : ''}`;
  }

  /** Server-side apply, as `kubectl apply --server-side` does it. */
  async apply<T = unknown>(obj: KubeObject, namespace?: string, fieldManager = 'k8s-tier'): Promise<T> {
    const path = await this.pathOf(obj, namespace);
    const namespaced = path.includes('/namespaces/');
    const body = {
      ...obj,
      metadata: { ...obj.metadata, ...(namespaced && { namespace: obj.metadata.namespace ?? namespace }) },
    };
    return this.req<T>(
      'PATCH',
      `${path}?fieldManager=${fieldManager}&force=true`,
      body,
      'application/apply-patch+yaml',
    );
  }

  /**
   * Polls `path` until the object exists and `pred` holds; returns the object. On timeout the
   * error says what was awaited, the object's last state, and whatever `explain` adds (e.g.
   * recent sidecar errors).
   */
  async waitFor<T = unknown>(
    path: string,
    pred: (obj: T) => boolean,
    what: string,
    timeoutMs = 60_000,
    explain?: () => Promise<string> | string,
  ): Promise<T> {
    return this.poll(path, (o: T | undefined): o is T => o !== undefined && pred(o), what, timeoutMs, explain);
  }

  /** Polls `path` until the object is gone (as waitFor, for a deletion). */
  async waitGone(
    path: string,
    what: string,
    timeoutMs = 60_000,
    explain?: () => Promise<string> | string,
  ): Promise<void> {
    await this.poll(path, (o: unknown): o is undefined => o === undefined, what, timeoutMs, explain);
  }

  /** Reads `path` until `done` accepts what it reads (the object, or undefined while there is none). */
  private async poll<T, U extends T | undefined>(
    path: string,
    done: (obj: T | undefined) => obj is U,
    what: string,
    timeoutMs: number,
    explain?: () => Promise<string> | string,
  ): Promise<U> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const last = await this.tryGet<T>(path);
      if (done(last)) return last;
      if (Date.now() > end) {
        const extra = explain ? await explain() : '';
        throw new Error(
          `timed out after ${timeoutMs / 1000} s waiting for ${what}\n  last state of ${path}: ${JSON.stringify(statusOf(last))}${extra ? `\n${extra}` : ''}`,
        );
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}

/** An object's status when it has one (the part a wait is usually about), else the object. */
function statusOf(obj: unknown): unknown {
  if (typeof obj === 'object' && obj !== null && 'status' in obj) return obj.status;
  return obj ?? null;
}
