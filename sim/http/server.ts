// The HTTPS API server: the request pipeline of pveproxy (auth, routing, permissions, parameter
// checks, handler) plus fault injection and request logging. Answers carry exactly
// `Content-Type: application/json;charset=UTF-8`, the message as status text, and close the
// connection after errors, as pve-http-server does.

import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { sleep } from '../locks.js';
import { type SimContext, getNode } from '../ops/context.js';
import type { RequestLog, RequestLogEntry } from '../requestlog.js';
import { Perms, authenticate } from './auth.js';
import { ApiError, BareError, paramError } from './errors.js';
import { validateParams } from './params.js';
import { type ConnectionStats, pveproxyKeepAlive } from './keep-alive.js';
import { type Router, WithTotal, routeKey } from './router.js';

const CT_JSON = 'application/json;charset=UTF-8';
const MAX_POST = 64 * 1024;

class Dropped extends Error {}

function firstLine(msg: string): string {
  return (msg.split('\n')[0] ?? '').replace(/[^\t\x20-\x7e]/g, '?');
}

function send(req: IncomingMessage, res: ServerResponse, status: number, message: string, body?: unknown): void {
  const now = new Date().toUTCString();
  const headers: Record<string, string> = {
    'Cache-Control': 'max-age=0',
    Expires: now,
    Pragma: 'no-cache',
    Server: 'pve-api-daemon/3.0',
  };
  let payload: Buffer = Buffer.alloc(0);
  if (body !== undefined) {
    payload = Buffer.from(JSON.stringify(body));
    headers['Content-Type'] = CT_JSON;
    if (payload.length > 1024 && /gzip/.test(req.headers['accept-encoding'] ?? '')) {
      payload = gzipSync(payload);
      headers['Content-Encoding'] = 'gzip';
    }
  }
  headers['Content-Length'] = String(payload.length);
  if (status >= 400) headers.Connection = 'close';
  res.writeHead(status, firstLine(message) || 'Error', headers);
  res.end(payload);
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_POST) reject(new BareError(501, 'for data too large'));
      else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function parseBody(req: IncomingMessage, body: Buffer): Record<string, string> {
  if (body.length === 0) return {};
  const ct = (req.headers['content-type'] ?? '').replace(/;.*$/s, '').trim().toLowerCase();
  if (ct === '' || ct === 'application/x-www-form-urlencoded') {
    return Object.fromEntries(new URLSearchParams(body.toString('utf8')));
  }
  if (ct === 'application/json') {
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch (e) {
      throw new ApiError(501, `malformed JSON string: ${(e as Error).message}`);
    }
    const out: Record<string, string> = {};
    if (parsed && typeof parsed === 'object') {
      for (const [k, v] of Object.entries(parsed)) {
        if (v === null || v === undefined) continue;
        out[k] = typeof v === 'boolean' ? (v ? '1' : '0') : typeof v === 'object' ? JSON.stringify(v) : String(v);
      }
    }
    return out;
  }
  throw new ApiError(506, `upload 'Content-Type '${req.headers['content-type']}' not implemented`);
}

export interface ApiServer {
  server: Server;
  port: number;
  /** Connections opened and who closed them (pveproxy's keep-alive, keep-alive.ts). */
  connections: ConnectionStats;
  close(): Promise<void>;
}

export async function startApiServer(opts: {
  sim: SimContext;
  router: Router;
  log: RequestLog;
  cert: Buffer;
  key: Buffer;
  port: number;
}): Promise<ApiServer> {
  const { sim, router, log } = opts;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = Date.now();
    const method = req.method ?? 'GET';
    const url = new URL(req.url ?? '/', 'https://127.0.0.1');
    const entry: Omit<RequestLogEntry, 'seq' | 'time'> = {
      method,
      path: url.pathname,
      route: `${method} (unmatched)`,
      status: 0,
      durationMs: 0,
    };
    let drop: false | 'before' | 'after' = false;
    try {
      if (!['GET', 'POST', 'PUT', 'DELETE'].includes(method)) {
        throw new BareError(501, `method '${method}' not available`);
      }
      const body = await readBody(req);
      if (body.length > 0 && method !== 'PUT' && method !== 'POST') {
        throw new BareError(501, `Unexpected content for method '${method}'`);
      }
      const m = /^\/api2\/+([a-z][a-z0-9]+)(\/.*)?$/.exec(url.pathname);
      if (!m) throw new BareError(501, `no such file '${url.pathname}'`);
      const rel = m[2] ?? '/';
      if (m[1] !== 'json') throw new BareError(501, `no formatter for uri ${rel}, ${m[1]}`);

      const match = router.match(method, rel);
      if (match) entry.route = routeKey(match.route);

      const auth = match?.route.world
        ? { ok: true as const, identity: { id: '', kind: 'ticket' as const, privileges: new Set<string>() } }
        : authenticate(
            sim.state,
            {
              method,
              authorization: req.headers.authorization,
              cookie: req.headers.cookie,
              csrfToken: header(req, 'csrfpreventiontoken'),
            },
            sim.nowSec(),
          );
      if (!auth.ok) {
        const delay = sim.faults.get().authFailureDelayMs;
        if (delay > 0) await sleep(delay);
        entry.status = 401;
        send(req, res, 401, auth.message);
        return;
      }
      if (auth.identity.id) entry.tokenId = auth.identity.id;
      drop = sim.faults.shouldDrop(entry.route);
      if (drop === 'before') {
        entry.fault = 'drop-before';
        throw new Dropped();
      }
      // The injected latency stands for the whole fixed cost of a call (network, pveproxy,
      // pvedaemon), so it runs from the request's arrival: the simulator's own parsing and
      // ticket check so far are part of it, not added on top. What a call waits for beyond
      // that (a task with `delay`, a config lock) still adds, as it does in Proxmox.
      const wait = sim.faults.latencyFor(entry.route) - (Date.now() - started);
      if (wait > 0) await sleep(wait);
      if (sim.faults.shouldError(entry.route)) {
        entry.fault = 'error';
        throw new ApiError(500, sim.faults.get().errorMessage);
      }
      if (!match) throw new ApiError(501, `Method '${method} ${rel.replace(/\/+$/, '') || '/'}' not implemented`);

      const raw: Record<string, string> = { ...parseBody(req, body) };
      for (const [k, v] of url.searchParams) raw[k] = v;
      entry.params = { ...raw };
      // the request log is readable over the admin API: never keep a password in it
      if (entry.params.password !== undefined)
        entry.params.password = entry.params.password.startsWith('PVE:') ? '(ticket)' : '(password)';
      for (const [k, v] of Object.entries(match.pathParams)) {
        if (raw[k] !== undefined && raw[k] !== v) {
          throw paramError({ [k]: 'duplicate parameter (already defined in URI) with conflicting values!' });
        }
        raw[k] = v;
      }
      const perms = new Perms(auth.identity);
      match.route.perm?.(perms, raw);
      if (match.pathParams.node !== undefined) getNode(sim, match.pathParams.node);
      const params = validateParams(match.route.schema, raw);
      const result = await match.route.handler({ sim, params, perms, user: auth.identity.id });
      if (drop === 'after') {
        entry.fault = 'drop-after';
        throw new Dropped();
      }
      entry.status = 200;
      if (result instanceof WithTotal) send(req, res, 200, 'OK', { data: result.data, total: result.total });
      else send(req, res, 200, 'OK', { data: result ?? null });
    } catch (e) {
      if (e instanceof Dropped) {
        entry.status = 0;
        req.socket.destroy();
        return;
      }
      if (drop === 'after') {
        // the call ran (and failed); the answer is lost all the same
        entry.fault = 'drop-after';
        entry.status = 0;
        req.socket.destroy();
        return;
      }
      const err = e instanceof ApiError ? e : new ApiError(500, e instanceof Error ? e.message : String(e));
      entry.status = err.status;
      if (err instanceof BareError) {
        send(req, res, err.status, err.message);
        return;
      }
      const body: Record<string, unknown> = { data: null };
      if (err.errors) body.errors = err.errors;
      body.message = err.message;
      send(req, res, err.status, err.message, body);
    } finally {
      entry.durationMs = Date.now() - started;
      log.record(entry);
    }
  }

  const server = createServer({ cert: opts.cert, key: opts.key, keepAlive: true }, (req, res) => {
    handle(req, res).catch((e: unknown) => {
      // a bug in the pipeline itself: answer something rather than leave the client hanging
      const message = e instanceof Error ? e.message : String(e);
      if (!res.headersSent) send(req, res, 500, `simulator internal error: ${message}`, { data: null });
    });
  });
  const { stats } = pveproxyKeepAlive(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    server,
    port,
    connections: stats,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
