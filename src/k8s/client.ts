// The KubeApi port on @kubernetes/client-node, which brings what a hand-written client would get
// wrong or leave out: every kubeconfig auth method (client certificates, tokens, exec plugins
// such as Talos', OIDC), merged KUBECONFIG lists, contexts, and the in-cluster ServiceAccount.
// Import this module only from a subcommand, with `await import()`: the library costs ~0.4 s and
// ~90 MB of RSS to load, which the CSI server must never pay (test/unit/k8s checks the import
// graph of src/main.ts).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  ApiException,
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  StorageV1Api,
  V1DeleteOptions,
  V1Preconditions,
  setHeaderOptions,
  type ConfigurationOptions,
  type V1Status,
} from '@kubernetes/client-node';
import type { DeleteOptions, KubeApi, KubeSource, MergePatch, WriteOptions } from './api.js';
import { KubeError } from './errors.js';

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * Where the credentials come from, in kubectl's order: --kubeconfig, KUBECONFIG (a list), then
 * ~/.kube/config, then the in-cluster ServiceAccount of a Job/CronJob pod. Never the library's
 * last resort (http://localhost:8080 without credentials): with nothing found it says so.
 */
export function loadKubeConfig(src: KubeSource = {}): { kc: KubeConfig; from: string } {
  const env = src.env ?? process.env;
  const kc = new KubeConfig();
  let from: string;
  const files = src.kubeconfig ? [src.kubeconfig] : (env.KUBECONFIG ?? '').split(path.delimiter).filter(Boolean);
  const home = env.HOME ?? os.homedir();
  const saRoot = src.serviceAccountRoot ?? '';
  const [first, ...others] = files;
  if (first !== undefined) {
    for (const f of files) if (!fs.existsSync(f)) throw new Error(`kubeconfig ${f} does not exist`);
    kc.loadFromFile(first);
    for (const f of others) {
      const more = new KubeConfig();
      more.loadFromFile(f);
      kc.mergeConfig(more);
    }
    from = files.join(path.delimiter);
  } else if (home && fs.existsSync(path.join(home, '.kube', 'config'))) {
    kc.loadFromFile(path.join(home, '.kube', 'config'));
    from = path.join(home, '.kube', 'config');
  } else if (env.KUBERNETES_SERVICE_HOST && fs.existsSync(path.join(saRoot + SA_DIR, 'token'))) {
    // The library reads the host and port from process.env; the token and CA from the prefix.
    const saved = { host: process.env.KUBERNETES_SERVICE_HOST, port: process.env.KUBERNETES_SERVICE_PORT };
    process.env.KUBERNETES_SERVICE_HOST = env.KUBERNETES_SERVICE_HOST;
    process.env.KUBERNETES_SERVICE_PORT = env.KUBERNETES_SERVICE_PORT ?? '443';
    try {
      kc.loadFromCluster(saRoot || undefined);
    } finally {
      if (saved.host === undefined) delete process.env.KUBERNETES_SERVICE_HOST;
      else process.env.KUBERNETES_SERVICE_HOST = saved.host;
      if (saved.port === undefined) delete process.env.KUBERNETES_SERVICE_PORT;
      else process.env.KUBERNETES_SERVICE_PORT = saved.port;
    }
    from = 'in-cluster service account';
  } else {
    throw new Error(
      'no Kubernetes credentials: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, or run in a pod with a service account',
    );
  }
  if (src.context) {
    if (!kc.getContextObject(src.context))
      throw new Error(
        `kubeconfig has no context "${src.context}" (known: ${
          kc
            .getContexts()
            .map((c) => c.name)
            .join(', ') || 'none'
        })`,
      );
    kc.setCurrentContext(src.context);
  }
  if (!kc.getCurrentCluster())
    throw new Error(`kubeconfig (${from}) names no cluster for context "${kc.getCurrentContext()}"`);
  return { kc, from };
}

/** The API server's Status message when it sent one, else the library's. */
function toKubeError(e: unknown, what: string): unknown {
  if (!(e instanceof ApiException)) return e;
  let status: Partial<V1Status> | undefined;
  const body: unknown = e.body;
  if (typeof body === 'string') {
    try {
      status = JSON.parse(body) as V1Status;
    } catch {
      status = undefined;
    }
  } else if (body && typeof body === 'object') status = body;
  const reason = status?.reason ?? String(e.code);
  return new KubeError(e.code, reason, `${what}: ${status?.message ?? `HTTP ${e.code}`}`, { cause: e });
}

// The generated API chains middleware through `.toPromise()`; a duck-typed one is enough.
const resolved = <T>(v: T) => ({ toPromise: () => Promise.resolve(v) });

function options(o: { signal?: AbortSignal | undefined; contentType?: string }): ConfigurationOptions {
  let opt: ConfigurationOptions = {
    middleware: [
      {
        pre: (ctx: { setSignal(s: AbortSignal): void }) => {
          if (o.signal) ctx.setSignal(o.signal);
          return resolved(ctx);
        },
        post: (res: unknown) => resolved(res),
      },
    ] as unknown as NonNullable<ConfigurationOptions['middleware']>,
    middlewareMergeStrategy: 'append',
  };
  if (o.contentType) opt = setHeaderOptions('Content-Type', o.contentType, opt);
  return opt;
}

const dry = (o?: { dryRun?: boolean }) => (o?.dryRun ? { dryRun: 'All' } : {});

/** A merge patch carrying resourceVersion is refused with 409 when the object changed. */
function guarded(patch: MergePatch, o?: WriteOptions): MergePatch {
  if (!o?.resourceVersion) return patch;
  const meta = (patch.metadata ?? {}) as Record<string, unknown>;
  return { ...patch, metadata: { ...meta, resourceVersion: o.resourceVersion } };
}

function deleteBody(o?: DeleteOptions): V1DeleteOptions {
  const body = new V1DeleteOptions();
  if (o?.uid === undefined && o?.resourceVersion === undefined) return body;
  body.preconditions = new V1Preconditions();
  if (o.uid !== undefined) body.preconditions.uid = o.uid;
  if (o.resourceVersion !== undefined) body.preconditions.resourceVersion = o.resourceVersion;
  return body;
}

/** Items per page of a list: a large cluster's PVs come in several answers, all of them read. */
export const PAGE_SIZE = 500;
const MAX_PAGES = 10_000;

interface Page<T> {
  items: T[];
  metadata?: { _continue?: string; remainingItemCount?: number };
}

/**
 * Every item of a list, page after page: an answer carrying `metadata.continue` is not the whole
 * list (a server or proxy may page even when we ask for everything), and a decision taken on
 * part of a list could take the rest for absent. The pages of one list are one consistent
 * snapshot (the continue token pins its resourceVersion); an expired token (410) fails the call
 * rather than mixing snapshots.
 */
async function allPages<T>(what: string, fetch: (cont: string | undefined) => Promise<Page<T>>): Promise<T[]> {
  const items: T[] = [];
  let cont: string | undefined;
  for (let page = 0; page < MAX_PAGES; page++) {
    const answer = await fetch(cont);
    items.push(...answer.items);
    cont = answer.metadata?._continue || undefined;
    if (cont === undefined) {
      if ((answer.metadata?.remainingItemCount ?? 0) > 0)
        throw new KubeError(500, 'IncompleteList', `${what}: the answer says items remain but gives no continue token`);
      return items;
    }
  }
  throw new KubeError(500, 'IncompleteList', `${what}: more than ${MAX_PAGES} pages`);
}

export class ClientNodeKube implements KubeApi {
  readonly describe: string;
  private readonly core: CoreV1Api;
  private readonly storage: StorageV1Api;

  constructor(kc: KubeConfig, from: string) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.storage = kc.makeApiClient(StorageV1Api);
    this.describe = `${kc.getCurrentCluster()?.server ?? '?'} (${from}, context ${kc.getCurrentContext() || '-'})`;
  }

  private async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      throw toKubeError(e, what);
    }
  }

  private async maybe<T>(what: string, fn: () => Promise<T>): Promise<T | undefined> {
    try {
      return await this.call(what, fn);
    } catch (e) {
      if (e instanceof KubeError && e.status === 404) return undefined;
      throw e;
    }
  }

  private async gone(what: string, fn: () => Promise<unknown>): Promise<boolean> {
    return (await this.maybe(what, async () => (await fn(), true))) ?? false;
  }

  /** A paged list through call(): its errors are the API server's, every page read. */
  private list<T>(what: string, fetch: (page: { limit: number; _continue?: string }) => Promise<Page<T>>) {
    return allPages(what, (cont) =>
      this.call(what, () => fetch({ limit: PAGE_SIZE, ...(cont !== undefined && { _continue: cont }) })),
    );
  }

  listPersistentVolumes(signal?: AbortSignal) {
    return this.list('list PersistentVolumes', (page) => this.core.listPersistentVolume(page, options({ signal })));
  }
  getPersistentVolume(name: string, signal?: AbortSignal) {
    return this.maybe(`get PersistentVolume ${name}`, () =>
      this.core.readPersistentVolume({ name }, options({ signal })),
    );
  }
  createPersistentVolume(body: Parameters<KubeApi['createPersistentVolume']>[0], o?: WriteOptions) {
    return this.call(`create PersistentVolume ${body.metadata?.name}`, () =>
      this.core.createPersistentVolume({ body, ...dry(o) }, options({})),
    );
  }
  patchPersistentVolume(name: string, patch: MergePatch, o?: WriteOptions) {
    return this.call(`patch PersistentVolume ${name}`, () =>
      this.core.patchPersistentVolume(
        { name, body: guarded(patch, o), ...dry(o) },
        options({ contentType: PatchStrategy.MergePatch }),
      ),
    );
  }
  deletePersistentVolume(name: string, o?: DeleteOptions) {
    return this.gone(`delete PersistentVolume ${name}`, () =>
      this.core.deletePersistentVolume({ name, body: deleteBody(o), ...dry(o) }, options({})),
    );
  }

  listPersistentVolumeClaims(signal?: AbortSignal) {
    return this.list('list PersistentVolumeClaims', (page) =>
      this.core.listPersistentVolumeClaimForAllNamespaces(page, options({ signal })),
    );
  }
  getPersistentVolumeClaim(namespace: string, name: string, signal?: AbortSignal) {
    return this.maybe(`get PersistentVolumeClaim ${namespace}/${name}`, () =>
      this.core.readNamespacedPersistentVolumeClaim({ namespace, name }, options({ signal })),
    );
  }
  createPersistentVolumeClaim(body: Parameters<KubeApi['createPersistentVolumeClaim']>[0], o?: WriteOptions) {
    const namespace = body.metadata?.namespace ?? 'default';
    return this.call(`create PersistentVolumeClaim ${namespace}/${body.metadata?.name}`, () =>
      this.core.createNamespacedPersistentVolumeClaim({ namespace, body, ...dry(o) }, options({})),
    );
  }
  patchPersistentVolumeClaim(namespace: string, name: string, patch: MergePatch, o?: WriteOptions) {
    return this.call(`patch PersistentVolumeClaim ${namespace}/${name}`, () =>
      this.core.patchNamespacedPersistentVolumeClaim(
        { namespace, name, body: guarded(patch, o), ...dry(o) },
        options({ contentType: PatchStrategy.MergePatch }),
      ),
    );
  }
  deletePersistentVolumeClaim(namespace: string, name: string, o?: DeleteOptions) {
    return this.gone(`delete PersistentVolumeClaim ${namespace}/${name}`, () =>
      this.core.deleteNamespacedPersistentVolumeClaim({ namespace, name, body: deleteBody(o), ...dry(o) }, options({})),
    );
  }

  listVolumeAttachments(signal?: AbortSignal) {
    return this.list('list VolumeAttachments', (page) => this.storage.listVolumeAttachment(page, options({ signal })));
  }
  listPods(namespace: string, signal?: AbortSignal) {
    return this.list(`list Pods in ${namespace}`, (page) =>
      this.core.listNamespacedPod({ namespace, ...page }, options({ signal })),
    );
  }
  listNodes(signal?: AbortSignal) {
    return this.list('list Nodes', (page) => this.core.listNode(page, options({ signal })));
  }
  listStorageClasses(signal?: AbortSignal) {
    return this.list('list StorageClasses', (page) => this.storage.listStorageClass(page, options({ signal })));
  }
  getNamespace(name: string, signal?: AbortSignal) {
    return this.maybe(`get Namespace ${name}`, () => this.core.readNamespace({ name }, options({ signal })));
  }
  getSecret(namespace: string, name: string, signal?: AbortSignal) {
    return this.maybe(`get Secret ${namespace}/${name}`, () =>
      this.core.readNamespacedSecret({ namespace, name }, options({ signal })),
    );
  }
}

/** Loads credentials (see loadKubeConfig) and returns the port on them. */
export function connectKube(src: KubeSource = {}): KubeApi {
  const { kc, from } = loadKubeConfig(src);
  return new ClientNodeKube(kc, from);
}
