// The admin endpoint: plain HTTP on 127.0.0.1, a separate port from the API. JSON in, JSON out.
// Routes are listed in docs/simulator.md; benchmarks use /counters, tests use /faults and /reset.

import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Faults, parseFaults } from './faults.js';
import { syncSilentDetach } from './ops/detach-fault.js';
import { lockKey, storageLockFile, vmLockFile } from './locks.js';
import type { SimContext } from './ops/context.js';
import { setVmStatus } from './ops/vm-apply.js';
import { writeVolume } from './ops/storage.js';
import type { RequestLog } from './requestlog.js';

export interface AdminHooks {
  ctx: SimContext;
  log: RequestLog;
  initialFaults: Faults;
  stateDump(): Promise<unknown>;
  reset(): Promise<void>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8').trim();
  if (!text) return {};
  try {
    const v = JSON.parse(text) as unknown;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('expected a JSON object');
    return v as Record<string, unknown>;
  } catch (e) {
    throw new HttpError(400, `request body: ${(e as Error).message}`);
  }
}

function reply(res: ServerResponse, status: number, body: unknown): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) });
  res.end(payload);
}

async function route(h: AdminHooks, req: IncomingMessage, url: URL): Promise<unknown> {
  const { ctx } = h;
  const method = req.method ?? 'GET';
  const path = url.pathname.replace(/\/+$/, '') || '/';
  const key = `${method} ${path}`;
  switch (key) {
    case 'GET /health':
      return { ok: true };
    case 'GET /state':
      return h.stateDump();
    case 'GET /requests': {
      const since = Number(url.searchParams.get('since') ?? 0);
      const limit = Number(url.searchParams.get('limit') ?? 10_000);
      return { lastSeq: h.log.lastSeq(), entries: h.log.list(since, limit) };
    }
    case 'GET /counters':
      return h.log.getCounters();
    case 'POST /counters/reset':
      h.log.reset();
      return { ok: true };
    case 'POST /reset':
      await h.reset();
      return { ok: true };
    case 'GET /faults':
      return ctx.faults.get();
    case 'PUT /faults':
    case 'PATCH /faults': {
      const body = await readJson(req);
      const base = method === 'PUT' ? h.initialFaults : ctx.faults.get();
      try {
        ctx.faults.set(parseFaults(body, 'faults', base));
      } catch (e) {
        throw new HttpError(400, (e as Error).message);
      }
      syncSilentDetach(ctx);
      return ctx.faults.get();
    }
    case 'GET /tasks':
      return ctx.tasks.list().map(({ done: _done, ...t }) => t);
    case 'POST /locks':
      return holdLock(ctx, await readJson(req));
    case 'POST /write':
      return writeData(ctx, await readJson(req));
  }
  const vmMatch = /^\/vms\/(\d+)$/.exec(path);
  if (vmMatch && method === 'PATCH') return patchVm(ctx, Number(vmMatch[1]), await readJson(req));
  throw new HttpError(404, `no admin route '${key}'`);
}

/** A guest writing into a volume: {node, storage, volume, bytes, offset?}; thin usage grows (ops/storage.ts). */
async function writeData(ctx: SimContext, body: Record<string, unknown>): Promise<unknown> {
  const { node, storage, volume, bytes, offset = 0 } = body;
  if (typeof node !== 'string' || typeof storage !== 'string' || typeof volume !== 'string')
    throw new HttpError(400, 'write: node, storage and volume (the volname) are required strings');
  if (!Number.isSafeInteger(bytes) || (bytes as number) < 0 || !Number.isSafeInteger(offset) || (offset as number) < 0)
    throw new HttpError(400, 'write: bytes and offset must be whole numbers of bytes, 0 or more');
  try {
    const inPool = await writeVolume(ctx, node, storage, volume, offset as number, bytes as number);
    return { volume: `${storage}:${volume}`, bytesInPool: inPool };
  } catch (e) {
    throw new HttpError(404, (e as Error).message);
  }
}

async function patchVm(ctx: SimContext, vmid: number, body: Record<string, unknown>): Promise<unknown> {
  const vm = ctx.state.vms.get(vmid);
  if (!vm) throw new HttpError(404, `VM ${vmid} does not exist`);
  const fields = ['status', 'lock', 'hotplug', 'config', 'pending', 'snapshots'];
  for (const k of Object.keys(body)) {
    if (!fields.includes(k)) throw new HttpError(400, `unknown field '${k}' (${fields.join(', ')})`);
  }
  // Edits by hand, as `qm set` by a person or an edit of the .conf file would make them: no
  // task, no lock, no token of the driver (what the driver's caches cannot have seen).
  handEdit(vm.config, body.config, 'config');
  handEdit(vm.pending, body.pending, 'pending');
  if (body.snapshots !== undefined) {
    if (!isRecord(body.snapshots)) throw new HttpError(400, 'snapshots: expected {name: {key: value} | null}');
    for (const [name, keys] of Object.entries(body.snapshots)) {
      if (keys === null) vm.snapshots.delete(name);
      else {
        const section = new Map<string, string>();
        handEdit(section, keys, `snapshots.${name}`);
        vm.snapshots.set(name, section);
      }
    }
  }
  for (const k of ['lock', 'hotplug'] as const) {
    const v = body[k];
    if (v === undefined) continue;
    if (v === null) vm.config.delete(k);
    else if (typeof v === 'string' || typeof v === 'number') vm.config.set(k, String(v));
    else throw new HttpError(400, `${k}: expected a string, a number or null`);
  }
  if (body.status !== undefined) {
    if (body.status !== 'running' && body.status !== 'stopped') throw new HttpError(400, 'status: running or stopped');
    await setVmStatus(ctx, vm, body.status);
  }
  return { vmid, status: vm.status, lock: vm.config.get('lock') ?? null, hotplug: vm.config.get('hotplug') ?? null };
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Applies {key: value | null} to a section (null removes the key). */
function handEdit(section: Map<string, string>, edits: unknown, what: string): void {
  if (edits === undefined) return;
  if (!isRecord(edits)) throw new HttpError(400, `${what}: expected {key: value | null}`);
  for (const [k, v] of Object.entries(edits)) {
    if (v === null) section.delete(k);
    else if (typeof v === 'string' || typeof v === 'number') section.set(k, String(v));
    else throw new HttpError(400, `${what}.${k}: expected a string, a number or null`);
  }
}

/** Holds a VM config or storage lock for `holdMs`, as another writer on the host would. */
async function holdLock(ctx: SimContext, body: Record<string, unknown>): Promise<unknown> {
  const holdMs = Number(body.holdMs ?? 1000);
  if (!Number.isFinite(holdMs) || holdMs < 0) throw new HttpError(400, 'holdMs: expected milliseconds');
  let node: string;
  let file: string;
  if (body.vmid !== undefined) {
    const vmid = Number(body.vmid);
    const vm = ctx.state.vms.get(vmid);
    if (!vm) throw new HttpError(404, `VM ${vmid} does not exist`);
    node = vm.node;
    file = vmLockFile(vm.vmid);
  } else if (typeof body.storage === 'string' && typeof body.node === 'string') {
    node = body.node;
    file = storageLockFile(body.storage);
  } else {
    throw new HttpError(400, 'give {vmid} or {node, storage}, and holdMs');
  }
  const release = await ctx.locks.acquire(lockKey(node, file), file, Number(body.waitMs ?? 30_000));
  setTimeout(release, holdMs).unref();
  return { ok: true, node, file, holdMs };
}

export interface AdminServer {
  server: Server;
  port: number;
  close(): Promise<void>;
}

export async function startAdminServer(h: AdminHooks, port: number): Promise<AdminServer> {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    route(h, req, url).then(
      (body) => reply(res, 200, body),
      (e: unknown) => {
        const status = e instanceof HttpError ? e.status : 500;
        reply(res, status, { error: e instanceof Error ? e.message : String(e) });
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
