// ProxmoxApi over HTTPS with the proxmox-api package. We hand the package our own fetch:
// - TLS: verified against `ca_file` when set, system CAs otherwise, or not at all with
//   `insecure: true` (as upstream allows); an undici Agent caps connections per host.
// - A transport failure (refused, reset, TLS, timeout) becomes a synthetic HTTP 599 answer
//   instead of a thrown error. The package re-sends a request once when fetch throws, which
//   would silently repeat a POST/PUT/DELETE; with an answer it reports the failure instead and
//   the caller reads state back. Reads are retried once here, explicitly.
// - The body is read inside the timeout, so a stalled answer cannot hang a call.
// - The per-call AbortSignal reaches fetch through AsyncLocalStorage (the package has no
//   per-call options).
import { AsyncLocalStorage } from 'node:async_hooks';
import fs from 'node:fs';
import { Agent, fetch as undiciFetch, Response, type RequestInit } from 'undici';
import { ProxmoxEngine } from 'proxmox-api';
import type { ProxmoxClusterConfig } from '../../config/types.js';
import { FailedPrecondition, InvalidArgument } from '../../errors.js';
import type {
  ActiveTask,
  AllocRequest,
  CallOptions,
  ConfigChange,
  ConfigEntry,
  NodeResource,
  ProxmoxApi,
  ProxmoxVmLifecycle,
  StorageContentItem,
  StorageResource,
  StorageStatus,
  TaskListItem,
  TaskStatus,
  VmConfig,
  VmResource,
} from './api.js';
import { TRANSPORT_MARK, taskError, toCsiError } from './errors.js';
import { TicketEngine, TicketSession } from './ticket-session.js';

export interface HttpApiOptions {
  cluster: ProxmoxClusterConfig;
  /** Upper bound for one HTTP exchange, body included; default 30 s. */
  queryTimeoutMs?: number | undefined;
  /** Connections per Proxmox host; default 8. */
  connections?: number | undefined;
  /** Ticket login only: renew the ticket after this long (default 1 h; PVE tickets live 2 h). */
  ticketRenewAfterMs?: number | undefined;
}

export type HttpProxmoxApi = ProxmoxApi &
  ProxmoxVmLifecycle & {
    close(): Promise<void>;
    /** GET /access/permissions: the caller's effective privileges per ACL path (preflight). */
    permissions(o?: CallOptions): Promise<Record<string, Record<string, number>>>;
  };

const TOKEN_ID_RE = /.*@.+!.+/;
const TOKEN_SECRET_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Splits the configured URL into what the package takes (bare host, explicit port, schema). */
export function endpointOf(url: string, region: string): { host: string; port: number; schema: 'https' | 'http' } {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new InvalidArgument(
      `Proxmox cluster ${region}: url "${url}" is not a URL (expected https://HOST:8006/api2/json)`,
    );
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') {
    throw new InvalidArgument(`Proxmox cluster ${region}: url "${url}" must use https`);
  }
  const path = u.pathname.replace(/\/+$/, '');
  if (path !== '' && path !== '/api2/json') {
    throw new InvalidArgument(
      `Proxmox cluster ${region}: url path "${u.pathname}" is not supported; the API lives at /api2/json`,
    );
  }
  const schema = u.protocol === 'https:' ? 'https' : 'http';
  const port = u.port ? Number(u.port) : schema === 'https' ? 443 : 80;
  return { host: u.hostname, port, schema };
}

const seg = (s: string | number): string => String(s).replace(/[/?#%\s]/g, (c) => encodeURIComponent(c));
const bool = (v: unknown): boolean => v === 1 || v === true || v === '1';
const num = (v: unknown): number => (typeof v === 'number' ? v : Number(v ?? 0)) || 0;

export function createHttpProxmoxApi(opts: HttpApiOptions): HttpProxmoxApi {
  const c = opts.cluster;
  const queryTimeoutMs = opts.queryTimeoutMs ?? 30_000;
  const { host, port, schema } = endpointOf(c.url, c.region);
  const useToken = c.username === undefined;
  if (useToken && !TOKEN_ID_RE.test(c.tokenId ?? '')) {
    throw new InvalidArgument(`Proxmox cluster ${c.region}: token_id "${c.tokenId}" must look like USER@REALM!TOKENID`);
  }
  if (useToken && !TOKEN_SECRET_RE.test(c.tokenSecret ?? '')) {
    throw new InvalidArgument(
      `Proxmox cluster ${c.region}: token_secret must be the token's UUID (lowercase, as Proxmox shows it)`,
    );
  }
  let ca: Buffer | undefined;
  if (c.caFile && !c.insecure) {
    try {
      ca = fs.readFileSync(c.caFile);
    } catch (e) {
      throw new FailedPrecondition(
        `Proxmox cluster ${c.region}: cannot read ca_file ${c.caFile}: ${(e as Error).message}`,
      );
    }
  }
  const agent = new Agent({
    connections: opts.connections ?? 8,
    keepAliveTimeout: 10_000,
    connect: c.insecure
      ? { rejectUnauthorized: false }
      : ca
        ? { ca, rejectUnauthorized: true }
        : { rejectUnauthorized: true },
  });
  const callSignal = new AsyncLocalStorage<AbortSignal | undefined>();

  const fetchImpl = async (url: string | URL, init?: RequestInit): Promise<Response> => {
    const signals = [AbortSignal.timeout(queryTimeoutMs)];
    if (init?.signal) signals.push(init.signal as AbortSignal);
    const outer = callSignal.getStore();
    if (outer) signals.push(outer);
    const signal = AbortSignal.any(signals);
    try {
      const res = await undiciFetch(url, { ...init, dispatcher: agent, signal });
      const body = await res.text();
      // An empty body stays empty: a string would make undici add text/plain, and the package
      // would then throw on the content type instead of seeing a 401 "invalid PVE ticket".
      return new Response(body === '' ? null : body, {
        status: res.status,
        statusText: res.statusText,
        headers: res.headers,
      });
    } catch (e) {
      const why = outer?.aborted
        ? 'cancelled by caller'
        : signal.aborted
          ? `timed out after ${queryTimeoutMs} ms`
          : describe(e);
      return new Response(JSON.stringify({ data: null }), {
        status: 599,
        statusText: `${TRANSPORT_MARK} ${why}`.replace(/[^\t\x20-\x7e]/g, ' ').slice(0, 300),
        headers: { 'content-type': 'application/json;charset=UTF-8' },
      });
    }
  };

  const common = { host, port, schema, queryTimeout: queryTimeoutMs + 1_000, fetch: fetchImpl as never };
  const engine = useToken
    ? new ProxmoxEngine({ ...common, tokenID: c.tokenId!, tokenSecret: c.tokenSecret! })
    : new TicketEngine(
        { ...common, username: c.username!, password: c.password ?? '' },
        new TicketSession({
          apiBase: `${schema}://${host}:${port}/api2/json`,
          username: c.username!,
          password: c.password ?? '',
          region: c.region,
          fetch: fetchImpl as never,
          ...(opts.ticketRenewAfterMs && { renewAfterMs: opts.ticketRenewAfterMs }),
        }),
      );
  const who = useToken ? { tokenId: c.tokenId } : { username: c.username };

  async function call<T>(
    method: 'GET' | 'POST' | 'PUT' | 'DELETE',
    path: string,
    params: Record<string, unknown> | undefined,
    what: string,
    o?: CallOptions,
  ): Promise<T> {
    const attempts = method === 'GET' ? 2 : 1;
    for (let i = 1; ; i++) {
      try {
        return (await callSignal.run(o?.signal, () =>
          engine.doRequest(method, `/api2/json${path}`, path, params ? { ...params } : undefined),
        )) as T;
      } catch (e) {
        const err = toCsiError(e, {
          cluster: c.region,
          what,
          ...who,
          aborted: o?.signal?.aborted,
          timeoutMs: queryTimeoutMs,
        });
        if (i < attempts && err.kind === 'Unavailable' && !o?.signal?.aborted) continue;
        throw err;
      }
    }
  }

  const vmPath = (node: string, vmid: number) => `/nodes/${seg(node)}/qemu/${seg(vmid)}`;
  const storagePath = (node: string, storage: string) => `/nodes/${seg(node)}/storage/${seg(storage)}`;

  const api: HttpProxmoxApi = {
    async version(o) {
      const r = await call<{ version?: string; release?: string }>('GET', '/version', undefined, 'read version', o);
      return { version: String(r?.version ?? ''), release: r?.release };
    },
    async vmResources(o) {
      const rows = await call<Record<string, unknown>[]>('GET', '/cluster/resources', { type: 'vm' }, 'list VMs', o);
      return (rows ?? [])
        .filter((r) => r.type === 'qemu' || r.type === 'lxc')
        .map((r): VmResource => ({
          type: r.type as 'qemu' | 'lxc',
          vmid: num(r.vmid),
          name: String(r.name ?? ''),
          node: String(r.node ?? ''),
          status: r.status as string | undefined,
          template: bool(r.template),
        }));
    },
    async storageResources(o) {
      const rows = await call<Record<string, unknown>[]>(
        'GET',
        '/cluster/resources',
        { type: 'storage' },
        'list storages',
        o,
      );
      return (rows ?? [])
        .filter((r) => r.type === 'storage')
        .map((r): StorageResource => ({
          storage: String(r.storage ?? ''),
          node: String(r.node ?? ''),
          content: String(r.content ?? ''),
          plugintype: r.plugintype as string | undefined,
          shared: bool(r.shared),
          status: r.status as string | undefined,
          disk: num(r.disk),
          maxdisk: num(r.maxdisk),
        }));
    },
    async nodeResources(o) {
      const rows = await call<Record<string, unknown>[]>(
        'GET',
        '/cluster/resources',
        { type: 'node' },
        'list nodes',
        o,
      );
      return (rows ?? [])
        .filter((r) => r.type === 'node')
        .map((r): NodeResource => ({ node: String(r.node ?? ''), status: r.status as string | undefined }));
    },
    async storageStatus(node, storage, o) {
      const r = await call<Record<string, unknown>>(
        'GET',
        `${storagePath(node, storage)}/status`,
        undefined,
        `read status of storage ${storage} on ${node}`,
        o,
      );
      return {
        total: num(r.total),
        used: num(r.used),
        avail: num(r.avail),
        active: bool(r.active),
        enabled: r.enabled === undefined ? true : bool(r.enabled),
        type: r.type as string | undefined,
        shared: bool(r.shared),
        content: String(r.content ?? ''),
      } satisfies StorageStatus;
    },
    async listContent(node, storage, vmid, o) {
      const params: Record<string, unknown> = { content: 'images' };
      if (vmid !== undefined) params.vmid = vmid;
      const rows = await call<Record<string, unknown>[]>(
        'GET',
        `${storagePath(node, storage)}/content`,
        params,
        `list disks on ${storage} of ${node}`,
        o,
      );
      return (rows ?? []).map((r): StorageContentItem => ({
        volid: String(r.volid ?? ''),
        size: num(r.size),
        vmid: r.vmid === undefined ? undefined : num(r.vmid),
        format: r.format as string | undefined,
        content: r.content as string | undefined,
        ...(r.ctime !== undefined && Number.isFinite(Number(r.ctime)) && { ctime: Number(r.ctime) }),
      }));
    },
    async allocDisk(node, storage, req: AllocRequest, o) {
      const r = await call<string>(
        'POST',
        `${storagePath(node, storage)}/content`,
        {
          vmid: req.vmid,
          filename: req.filename,
          size: String(Math.ceil(req.sizeBytes / 1024)),
          format: req.format ?? 'raw',
        },
        `allocate ${req.filename} on ${storage} of ${node}`,
        o,
      );
      return typeof r === 'string' && r !== '' ? r : `${storage}:${req.filename}`;
    },
    async freeDisk(node, storage, volid, o) {
      const r = await call<unknown>(
        'DELETE',
        `${storagePath(node, storage)}/content/${seg(volid)}`,
        o?.waitSeconds ? { delay: o.waitSeconds } : undefined,
        `free ${volid} on ${node}`,
        o,
      );
      return typeof r === 'string' && r.startsWith('UPID:') ? r : null;
    },
    async vmConfig(node, vmid, o) {
      const r = await call<Record<string, unknown>>(
        'GET',
        `${vmPath(node, vmid)}/config`,
        undefined,
        `read config of VM ${vmid} on ${node}`,
        o,
      );
      const values: Record<string, string> = {};
      for (const [k, v] of Object.entries(r ?? {}))
        if (k !== 'digest' && v !== null && v !== undefined) values[k] = String(v);
      return { digest: String(r?.digest ?? ''), values } satisfies VmConfig;
    },
    async vmPending(node, vmid, o) {
      const rows = await call<Record<string, unknown>[]>(
        'GET',
        `${vmPath(node, vmid)}/pending`,
        undefined,
        `read pending changes of VM ${vmid} on ${node}`,
        o,
      );
      return (rows ?? []).map((r): ConfigEntry => ({
        key: String(r.key),
        value: r.value === undefined || r.value === null ? undefined : String(r.value),
        pending: r.pending === undefined || r.pending === null ? undefined : String(r.pending),
        pendingDelete: r.delete !== undefined && num(r.delete) > 0,
      }));
    },
    async updateVmConfig(node, vmid, change: ConfigChange, o) {
      const params: Record<string, unknown> = { ...(change.set ?? {}) };
      if (change.delete?.length) params.delete = change.delete.join(',');
      if (change.digest) params.digest = change.digest;
      if (change.waitSeconds) params.background_delay = change.waitSeconds;
      const what = `change config of VM ${vmid} on ${node}`;
      let r: unknown;
      try {
        r = await call<unknown>('POST', `${vmPath(node, vmid)}/config`, params, what, o);
      } catch (e) {
        // qemu-server's background_delay: the task ended within the wait with this exit status.
        const exit = change.waitSeconds ? /failed to update VM \d+: (.+)$/s.exec((e as Error).message)?.[1] : undefined;
        if (exit) throw taskError(exit.trim(), { cluster: c.region, what });
        throw e;
      }
      return typeof r === 'string' && r.startsWith('UPID:') ? r : null;
    },
    async unlinkDisks(node, vmid, keys, o) {
      await call<unknown>(
        'PUT',
        `${vmPath(node, vmid)}/unlink`,
        { idlist: keys.join(',') },
        `detach ${keys.join(',')} from VM ${vmid} on ${node}`,
        o,
      );
    },
    async resizeDisk(node, vmid, disk, size, o) {
      const r = await call<unknown>(
        'PUT',
        `${vmPath(node, vmid)}/resize`,
        { disk, size },
        `resize ${disk} of VM ${vmid} on ${node} to ${size}`,
        o,
      );
      return typeof r === 'string' && r.startsWith('UPID:') ? r : null;
    },
    async taskStatus(node, upid, o) {
      const r = await call<Record<string, unknown>>(
        'GET',
        `/nodes/${seg(node)}/tasks/${seg(upid)}/status`,
        undefined,
        `read task ${upid}`,
        o,
      );
      return {
        status: r?.status === 'stopped' ? 'stopped' : 'running',
        exitstatus: r?.exitstatus as string | undefined,
      } satisfies TaskStatus;
    },
    async activeTasks(node, filter, o) {
      // pve-manager's Tasks.pm: the active list leaves a token's id whole in `user`; the archive
      // splits it into `user` and `tokenid`. Both forms are read. The default limit is 50.
      const params: Record<string, unknown> = { source: 'active', limit: 1000 };
      if (filter.type) params.typefilter = filter.type;
      if (filter.vmid !== undefined) params.vmid = filter.vmid;
      const rows = await call<Record<string, unknown>[]>(
        'GET',
        `/nodes/${seg(node)}/tasks`,
        params,
        `list running tasks on ${node}`,
        o,
      );
      return (rows ?? []).map((r): ActiveTask => ({
        upid: String(r.upid ?? ''),
        node: String(r.node ?? node),
        type: String(r.type ?? ''),
        id: String(r.id ?? ''),
        user: r.tokenid ? `${String(r.user ?? '')}!${String(r.tokenid)}` : String(r.user ?? ''),
        starttime: num(r.starttime),
      }));
    },
    async createVm(node, vmid, options, o) {
      return upidOf(
        await call<unknown>(
          'POST',
          `/nodes/${seg(node)}/qemu`,
          { vmid, ...options },
          `create VM ${vmid} on ${node}`,
          o,
        ),
        `create VM ${vmid}`,
      );
    },
    async destroyVm(node, vmid, o) {
      return upidOf(
        await call<unknown>('DELETE', vmPath(node, vmid), undefined, `destroy VM ${vmid} on ${node}`, o),
        `destroy VM ${vmid}`,
      );
    },
    async migrateVm(node, vmid, target, o) {
      return upidOf(
        await call<unknown>(
          'POST',
          `${vmPath(node, vmid)}/migrate`,
          { target },
          `migrate VM ${vmid} from ${node} to ${target}`,
          o,
        ),
        `migrate VM ${vmid}`,
      );
    },
    async taskLog(node, upid, o) {
      const rows = await call<Array<{ t?: unknown }>>(
        'GET',
        `/nodes/${seg(node)}/tasks/${seg(upid)}/log`,
        { limit: 5000 },
        `read log of task ${upid}`,
        o,
      );
      return (rows ?? []).map((r) => String(r.t ?? ''));
    },
    async nodeTasks(node, q, o) {
      const params: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(q)) if (v !== undefined) params[k] = v;
      const rows = await call<Record<string, unknown>[] | null>(
        'GET',
        `/nodes/${seg(node)}/tasks`,
        params,
        `list tasks on ${node}`,
        o,
      );
      const text = (v: unknown): string | undefined =>
        typeof v === 'string' ? v : typeof v === 'number' ? String(v) : undefined;
      return (rows ?? []).map((r): TaskListItem => ({
        upid: text(r.upid) ?? '',
        node: text(r.node) ?? node,
        type: text(r.type) ?? '',
        id: text(r.id) ?? '',
        user: text(r.user) ?? '',
        tokenid: text(r.tokenid),
        starttime: num(r.starttime),
        endtime: r.endtime === undefined ? undefined : num(r.endtime),
        status: text(r.status),
      }));
    },
    async permissions(o) {
      return (
        (await call<Record<string, Record<string, number>>>(
          'GET',
          '/access/permissions',
          undefined,
          'read own permissions',
          o,
        )) ?? {}
      );
    },
    async close() {
      // destroy, not close: close waits for requests in flight (a VM config batch runs without
      // its caller's deadline), and shutdown must not. What was sent may still land; the next
      // start reconciles from Proxmox's state, as after kill -9.
      await agent.destroy();
    },
  };
  return api;
}

function describe(e: unknown): string {
  const parts: string[] = [];
  let cur: unknown = e;
  for (let i = 0; cur && i < 4; i++) {
    const msg = cur instanceof Error ? cur.message : String(cur);
    const code = (cur as { code?: string }).code;
    if (msg && msg !== 'fetch failed') parts.push(code && !msg.includes(code) ? `${msg} (${code})` : msg);
    cur = (cur as { cause?: unknown }).cause;
  }
  return parts.join(': ') || 'connection failed';
}

function upidOf(r: unknown, what: string): string {
  if (typeof r === 'string' && r.startsWith('UPID:')) return r;
  throw new Error(`${what}: Proxmox answered ${JSON.stringify(r)} instead of a task id`);
}
