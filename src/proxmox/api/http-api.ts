// ProxmoxApi over HTTPS through the proxmox-api package's typed client
// (`pve.nodes.$(node).qemu.$(vmid).config.$get()`), on our own fetch (transport.ts: TLS, pool,
// timeouts, cancellation). Each method reads the answer in one place: the package's generated
// types where they hold on the wire, wire.ts where they do not (said at each use). Failures
// become typed errors in errors.ts.
import fs from 'node:fs';
import type { Proxmox } from 'proxmox-api';
import type { ProxmoxClusterConfig } from '../../config/types.js';
import { FailedPrecondition, InvalidArgument } from '../../errors.js';
import type {
  ActiveTask,
  CallOptions,
  ConfigEntry,
  NodeResource,
  ProxmoxApi,
  ProxmoxSnapshotApi,
  ProxmoxVmLifecycle,
  StorageContentItem,
  StorageResource,
  TaskListItem,
  VmResource,
} from './api.js';
import { taskError, toCsiError } from './errors.js';
import { backgroundTaskExit } from './package-errors.js';
import { createTransport, packageFetch } from './transport.js';
import { flag, num, record, rows, text, upidOrNull } from './wire.js';

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
  ProxmoxVmLifecycle &
  ProxmoxSnapshotApi & {
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

/** A path segment as pveproxy expects it (the package's `$()` escapes only `/`). */
const seg = (s: string): string => s.replace(/[/?#%\s]/g, (c) => encodeURIComponent(c));

type Nodes = Proxmox.Api['nodes'];
type QemuConfigPost = NonNullable<Parameters<ReturnType<ReturnType<Nodes['$']>['qemu']['$']>['config']['$post']>[0]>;
type QemuConfigPut = NonNullable<Parameters<ReturnType<ReturnType<Nodes['$']>['qemu']['$']>['config']['$put']>[0]>;
type TaskListQuery = NonNullable<Parameters<ReturnType<Nodes['$']>['tasks']['$get']>[0]>;

export function createHttpProxmoxApi(opts: HttpApiOptions): HttpProxmoxApi {
  const c = opts.cluster;
  const queryTimeoutMs = opts.queryTimeoutMs ?? 30_000;
  const { host, port, schema } = endpointOf(c.url, c.region);
  const credentials = credentialsOf(c);
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
  const transport = createTransport({
    queryTimeoutMs,
    connections: opts.connections ?? 8,
    insecure: c.insecure,
    ca,
  });

  // The proxmox-api package (and the undici it imports) is loaded on the first call, not when
  // the controller is built: its evaluation was most of what the Proxmox driver added to the
  // start (docs/performance.md, start-up). Every use of `pve` is inside a call's request.
  let pve!: Proxmox.Api;
  let loading: Promise<void> | undefined;
  const load = (): Promise<void> =>
    (loading ??= (async () => {
      const [{ ProxmoxEngine, proxmoxApi }, { TicketEngine, TicketSession }] = await Promise.all([
        import('proxmox-api'),
        import('./ticket-session.js'),
      ]);
      const common = { host, port, schema, queryTimeout: queryTimeoutMs + 1_000, fetch: packageFetch(transport.fetch) };
      const engine =
        credentials.kind === 'token'
          ? new ProxmoxEngine({ ...common, tokenID: credentials.tokenId, tokenSecret: credentials.tokenSecret })
          : new TicketEngine(
              { ...common, username: credentials.username, password: credentials.password },
              new TicketSession({
                apiBase: `${schema}://${host}:${port}/api2/json`,
                username: credentials.username,
                password: credentials.password,
                region: c.region,
                fetch: transport.fetch,
                ...(opts.ticketRenewAfterMs && { renewAfterMs: opts.ticketRenewAfterMs }),
              }),
            );
      pve = proxmoxApi(engine);
    })().catch((e: unknown) => {
      loading = undefined;
      throw e;
    }));
  const who = credentials.kind === 'token' ? { tokenId: credentials.tokenId } : { username: credentials.username };

  /**
   * One Proxmox call: the caller's signal and typed errors. Nothing is sent again here: the
   * transport re-sends only a GET that met pveproxy's idle close (idle-reset.ts).
   */
  async function call<T>(
    _method: 'GET' | 'POST' | 'PUT' | 'DELETE',
    what: string,
    o: CallOptions | undefined,
    request: () => Promise<T>,
  ): Promise<T> {
    try {
      await load();
      return await transport.withSignal(o?.signal, request);
    } catch (e) {
      throw toCsiError(e, { cluster: c.region, what, ...who, aborted: o?.signal?.aborted, timeoutMs: queryTimeoutMs });
    }
  }

  const nodeOf = (node: string) => pve.nodes.$(seg(node));
  const vm = (node: string, vmid: number) => nodeOf(node).qemu.$(vmid);
  const storageOf = (node: string, storage: string) => nodeOf(node).storage.$(seg(storage));

  const api: HttpProxmoxApi = {
    async version(o) {
      const r = await call('GET', 'read version', o, () => pve.version.$get());
      return { version: r.version, release: r.release };
    },
    async vmResources(o) {
      const list = await call('GET', 'list VMs', o, () => pve.cluster.resources.$get({ type: 'vm' }));
      // vmid may be a string on the wire, template is 0/1 and not in the generated type (wire.ts).
      return rows(list).flatMap((r): VmResource[] =>
        r.type === 'qemu' || r.type === 'lxc'
          ? [
              {
                type: r.type,
                vmid: num(r.vmid) ?? 0,
                name: r.name ?? '',
                node: r.node ?? '',
                status: r.status,
                template: flag(r.template),
              },
            ]
          : [],
      );
    },
    async storageResources(o) {
      const list = await call('GET', 'list storages', o, () => pve.cluster.resources.$get({ type: 'storage' }));
      // shared is 0/1 and not in the generated type; disk sizes may be strings (wire.ts).
      return rows(list)
        .filter((r) => r.type === 'storage')
        .map((r): StorageResource => ({
          storage: r.storage ?? '',
          node: r.node ?? '',
          content: r.content ?? '',
          plugintype: r.plugintype,
          shared: flag(r.shared),
          status: r.status,
          disk: num(r.disk) ?? 0,
          maxdisk: num(r.maxdisk) ?? 0,
        }));
    },
    async nodeResources(o) {
      const list = await call('GET', 'list nodes', o, () => pve.cluster.resources.$get({ type: 'node' }));
      return rows(list)
        .filter((r) => r.type === 'node')
        .map((r): NodeResource => ({ node: r.node ?? '', status: r.status }));
    },
    async storageStatus(node, storage, o) {
      const r = record(
        await call('GET', `read status of storage ${storage} on ${node}`, o, () =>
          storageOf(node, storage).status.$get(),
        ),
      );
      // The generated type is `any`: every field is read as pve-storage's status call writes it.
      return {
        total: num(r.total) ?? 0,
        used: num(r.used) ?? 0,
        avail: num(r.avail) ?? 0,
        active: flag(r.active),
        enabled: r.enabled === undefined ? true : flag(r.enabled),
        type: text(r.type),
        shared: flag(r.shared),
        content: text(r.content) ?? '',
      };
    },
    async listContent(node, storage, vmid, o) {
      const list = await call('GET', `list disks on ${storage} of ${node}`, o, () =>
        storageOf(node, storage).content.$get(vmid === undefined ? { content: 'images' } : { content: 'images', vmid }),
      );
      // size, vmid and ctime may be strings on the wire; content is not in the generated type.
      return rows(list).map((r): StorageContentItem => {
        const ctime = num(r.ctime);
        return {
          volid: r.volid,
          size: num(r.size) ?? 0,
          vmid: num(r.vmid),
          format: r.format,
          content: text(r.content),
          ...(ctime !== undefined && { ctime }),
        };
      });
    },
    async allocDisk(node, storage, req, o) {
      const r: unknown = await call('POST', `allocate ${req.filename} on ${storage} of ${node}`, o, () =>
        storageOf(node, storage).content.$post({
          vmid: req.vmid,
          filename: req.filename,
          size: String(Math.ceil(req.sizeBytes / 1024)),
          format: req.format ?? 'raw',
        }),
      );
      return typeof r === 'string' && r !== '' ? r : `${storage}:${req.filename}`;
    },
    async freeDisk(node, storage, volid, o) {
      const wait = o?.waitSeconds;
      const r = await call('DELETE', `free ${volid} on ${node}`, o, () =>
        storageOf(node, storage)
          .content.$(seg(volid))
          .$delete(wait ? { delay: wait } : undefined),
      );
      return upidOrNull(r);
    },
    async vmConfig(node, vmid, o) {
      const r = await call('GET', `read config of VM ${vmid} on ${node}`, o, () => vm(node, vmid).config.$get());
      return { digest: text(record(r).digest) ?? '', values: configValues(r) };
    },
    async vmPending(node, vmid, o) {
      const list = await call('GET', `read pending changes of VM ${vmid} on ${node}`, o, () =>
        vm(node, vmid).pending.$get(),
      );
      // value/pending are typed string but carry the config's numbers as numbers (wire.ts).
      return rows(list).map((r): ConfigEntry => ({
        key: r.key,
        value: text(r.value),
        pending: text(r.pending),
        pendingDelete: (num(r.delete) ?? 0) > 0,
      }));
    },
    async vmSnapshots(node, vmid, o) {
      const list = await call('GET', `list snapshots of VM ${vmid} on ${node}`, o, () =>
        vm(node, vmid).snapshot.$get(),
      );
      return rows(list)
        .map((r) => text(record(r).name))
        .filter((n): n is string => n !== undefined && n !== 'current');
    },
    async vmSnapshotConfig(node, vmid, snapshot, o) {
      const r = await call('GET', `read snapshot ${snapshot} of VM ${vmid} on ${node}`, o, () =>
        vm(node, vmid).config.$get({ snapshot }),
      );
      return configValues(r);
    },
    async updateVmConfig(node, vmid, change, o) {
      const params: Record<string, string | number> = { ...(change.set ?? {}) };
      if (change.delete?.length) params.delete = change.delete.join(',');
      if (change.digest) params.digest = change.digest;
      if (change.waitSeconds) params.background_delay = change.waitSeconds;
      const what = `change config of VM ${vmid} on ${node}`;
      let r: unknown;
      try {
        // The generated parameter type lists only scsi0..3 (qemu-server takes scsi0..30) and types
        // each key; the driver sends drive strings, delete, digest and background_delay.
        r = await call('POST', what, o, () => vm(node, vmid).config.$post(params as QemuConfigPost));
      } catch (e) {
        // background_delay: the task ended within the wait with this exit status.
        const exit = change.waitSeconds && e instanceof Error ? backgroundTaskExit(e.cause) : undefined;
        if (exit) throw taskError(exit.trim(), { cluster: c.region, what });
        throw e;
      }
      return upidOrNull(r);
    },
    async unlinkDisks(node, vmid, keys, o) {
      const what = `detach ${keys.join(',')} from VM ${vmid} on ${node}`;
      const idlist = keys.join(',');
      if (o?.digest) {
        // The synchronous update that PUT …/unlink runs, in the form that takes a digest.
        const params = { delete: idlist, digest: o.digest };
        await call('PUT', what, o, () => vm(node, vmid).config.$put(params as QemuConfigPut));
        return;
      }
      await call('PUT', what, o, () => vm(node, vmid).unlink.$put({ idlist }));
    },
    async resizeDisk(node, vmid, disk, size, o) {
      const r = await call('PUT', `resize ${disk} of VM ${vmid} on ${node} to ${size}`, o, () =>
        // The disk key comes from the VM's own config, so it is one of the generated union's keys.
        vm(node, vmid).resize.$put({ disk: disk as Proxmox.Tdisk_1, size, ...(o?.digest && { digest: o.digest }) }),
      );
      return upidOrNull(r);
    },
    async taskStatus(node, upid, o) {
      const r = await call('GET', `read task ${upid}`, o, () => nodeOf(node).tasks.$(seg(upid)).status.$get());
      return { status: r.status === 'stopped' ? 'stopped' : 'running', exitstatus: r.exitstatus };
    },
    async activeTasks(node, filter, o) {
      // pve-manager's Tasks.pm: the active list leaves a token's id whole in `user`; the archive
      // splits it into `user` and `tokenid`. Both forms are read. The default limit is 50.
      const q: TaskListQuery = { source: 'active', limit: 1000 };
      if (filter.type) q.typefilter = filter.type;
      if (filter.vmid !== undefined) q.vmid = filter.vmid;
      const list = await call('GET', `list running tasks on ${node}`, o, () => nodeOf(node).tasks.$get(q));
      // tokenid is not in the generated type; starttime may be a string (wire.ts).
      return rows(list).map((r): ActiveTask => {
        const tokenid = text(r.tokenid);
        return {
          upid: r.upid,
          node: r.node,
          type: r.type,
          id: r.id,
          user: tokenid ? `${r.user}!${tokenid}` : r.user,
          starttime: num(r.starttime) ?? 0,
        };
      });
    },
    async nodeTasks(node, query, o) {
      const q: TaskListQuery = {};
      if (query.typefilter !== undefined) q.typefilter = query.typefilter;
      if (query.vmid !== undefined) q.vmid = query.vmid;
      if (query.since !== undefined) q.since = query.since;
      if (query.source !== undefined) q.source = query.source;
      if (query.limit !== undefined) q.limit = query.limit;
      const list = await call('GET', `list tasks on ${node}`, o, () => nodeOf(node).tasks.$get(q));
      // id is the VMID as a number for qemu tasks; tokenid is not in the generated type (wire.ts).
      return rows(list).map((r): TaskListItem => {
        const endtime = num(r.endtime);
        return {
          upid: text(r.upid) ?? '',
          node: text(r.node) ?? node,
          type: text(r.type) ?? '',
          id: text(r.id) ?? '',
          user: text(r.user) ?? '',
          tokenid: text(r.tokenid),
          starttime: num(r.starttime) ?? 0,
          endtime,
          status: text(r.status),
        };
      });
    },
    async createVm(node, vmid, options, o) {
      const r: unknown = await call('POST', `create VM ${vmid} on ${node}`, o, () =>
        nodeOf(node).qemu.$post({ vmid, ...options }),
      );
      return upidOf(r, `create VM ${vmid}`);
    },
    async destroyVm(node, vmid, o) {
      const r: unknown = await call('DELETE', `destroy VM ${vmid} on ${node}`, o, () => vm(node, vmid).$delete());
      return upidOf(r, `destroy VM ${vmid}`);
    },
    async migrateVm(node, vmid, target, o) {
      const r: unknown = await call('POST', `migrate VM ${vmid} from ${node} to ${target}`, o, () =>
        vm(node, vmid).migrate.$post({ target }),
      );
      return upidOf(r, `migrate VM ${vmid}`);
    },
    async snapshotVm(node, vmid, snapname, o) {
      const r: unknown = await call('POST', `snapshot VM ${vmid} on ${node}`, o, () =>
        vm(node, vmid).snapshot.$post({ snapname }),
      );
      return upidOf(r, `snapshot VM ${vmid}`);
    },
    async deleteVmSnapshot(node, vmid, snapname, o) {
      const r: unknown = await call('DELETE', `delete snapshot ${snapname} of VM ${vmid} on ${node}`, o, () =>
        vm(node, vmid).snapshot.$(snapname).$delete({ force: true }),
      );
      return upidOf(r, `delete snapshot ${snapname} of VM ${vmid}`);
    },
    async linkedClone(node, vmid, req, o) {
      const r: unknown = await call('POST', `clone VM ${vmid} on ${node} as ${req.newid}`, o, () =>
        vm(node, vmid).clone.$post({
          newid: req.newid,
          snapname: req.snapname,
          full: false,
          name: req.name,
          description: req.description,
        }),
      );
      return upidOf(r, `clone VM ${vmid}`);
    },
    async reassignDisk(node, vmid, req, o) {
      const r: unknown = await call('POST', `move ${req.disk} of VM ${vmid} to VM ${req.targetVmid}`, o, () =>
        vm(node, vmid).move_disk.$post({
          disk: req.disk as never,
          'target-vmid': req.targetVmid,
          'target-disk': req.targetDisk as never,
          digest: req.digest,
          'target-digest': req.targetDigest,
        }),
      );
      return upidOf(r, `move ${req.disk} of VM ${vmid}`);
    },
    async taskLog(node, upid, o) {
      const list = await call('GET', `read log of task ${upid}`, o, () =>
        nodeOf(node).tasks.$(seg(upid)).log.$get({ limit: 5000 }),
      );
      return rows(list).map((r) => text(r.t) ?? '');
    },
    async permissions(o) {
      const r: unknown = await call('GET', 'read own permissions', o, () => pve.access.permissions.$get());
      // The generated type is `any`: ACL path -> privilege -> 1 (propagate) or 0.
      const out: Record<string, Record<string, number>> = {};
      for (const [path, privs] of Object.entries(record(r))) {
        const p: Record<string, number> = {};
        for (const [name, v] of Object.entries(record(privs))) p[name] = num(v) ?? 0;
        out[path] = p;
      }
      return out;
    },
    close: () => transport.close(),
  };
  return api;
}

type Credentials =
  { kind: 'token'; tokenId: string; tokenSecret: string } | { kind: 'ticket'; username: string; password: string };

/** API token (the default) or ticket login; the token's shape is checked with a clear message. */
function credentialsOf(c: ProxmoxClusterConfig): Credentials {
  if (c.username !== undefined) return { kind: 'ticket', username: c.username, password: c.password ?? '' };
  const tokenId = c.tokenId ?? '';
  const tokenSecret = c.tokenSecret ?? '';
  if (!TOKEN_ID_RE.test(tokenId)) {
    throw new InvalidArgument(`Proxmox cluster ${c.region}: token_id "${tokenId}" must look like USER@REALM!TOKENID`);
  }
  if (!TOKEN_SECRET_RE.test(tokenSecret)) {
    throw new InvalidArgument(
      `Proxmox cluster ${c.region}: token_secret must be the token's UUID (lowercase, as Proxmox shows it)`,
    );
  }
  return { kind: 'token', tokenId, tokenSecret };
}

function upidOf(r: unknown, what: string): string {
  const upid = upidOrNull(r);
  if (upid) return upid;
  throw new Error(`${what}: Proxmox answered ${JSON.stringify(r)} instead of a task id`);
}

/**
 * A config read's keys as text. The generated type calls many keys boolean or number; the driver
 * reads every value as the text of the config file line, which is what Proxmox sends (0/1,
 * numbers, strings).
 */
function configValues(r: unknown): Record<string, string> {
  const values: Record<string, string> = {};
  for (const [k, v] of Object.entries(record(r))) {
    const s = text(v);
    if (k !== 'digest' && s !== undefined) values[k] = s;
  }
  return values;
}
