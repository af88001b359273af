// The fetch the proxmox-api package is given: our TLS, connection pool, timeouts and
// cancellation, and no thrown transport errors.
// - TLS: verified against `ca_file` when set, system CAs otherwise, or not at all with
//   `insecure: true` (as upstream allows); an undici Agent caps connections per host.
// - A transport failure (refused, reset, TLS, timeout) becomes a synthetic HTTP 599 answer
//   instead of a thrown error. The package re-sends a request once when fetch throws, which
//   would silently repeat a POST/PUT/DELETE; with an answer it reports the failure instead and
//   the caller reads state back.
// - The one failure sent again, and only for a GET: a pooled keep-alive socket that pveproxy
//   closed as the request went out, before any byte of an answer (idle-reset.ts). A mutation is
//   never re-sent.
// - The body is read inside the timeout, so a stalled answer cannot hang a call.
// - The per-call AbortSignal reaches fetch through AsyncLocalStorage (the package has no
//   per-call options).
// - One exchange is one undici dispatch with its body collected into a buffer, not WHATWG
//   fetch: fetch's Request/Response objects and web streams cost ~0.4 ms of CPU per call (5×
//   the HTTP exchange itself), and it inflated gzip answers on the thread pool, a hop of a
//   few ms. The answer is the part of a Response the package and the ticket login read: status,
//   statusText (pveproxy's reason), headers.get(), text(), json().
import { AsyncLocalStorage } from 'node:async_hooks';
import { gunzip, gunzipSync } from 'node:zlib';
import type { ProxmoxEngineOptions } from 'proxmox-api';
import type { Agent, Dispatcher } from 'undici';
import { isIdleReset, watchedConnector } from './idle-reset.js';
import { TRANSPORT_MARK } from './package-errors.js';

export interface TransportOptions {
  /** Upper bound for one HTTP exchange, body included. */
  queryTimeoutMs: number;
  /** Connections per Proxmox host. */
  connections: number;
  /** TLS: skip verification. */
  insecure: boolean;
  /** TLS: the CA to verify against (system CAs when absent). */
  ca?: Buffer | undefined;
}

/** What the package and the ticket login send. */
export interface WireRequest {
  method?: string | undefined;
  headers?: Record<string, string> | undefined;
  body?: string | undefined;
  signal?: AbortSignal | undefined;
}

/** The part of a fetch Response the package and the ticket login read. */
export interface WireResponse {
  readonly status: number;
  readonly statusText: string;
  readonly ok: boolean;
  readonly headers: { get(name: string): string | null };
  /** Never a stream: no call of the driver answers application/octet-stream. */
  readonly body: null;
  text(): Promise<string>;
  json(): Promise<unknown>;
}

export type FetchLike = (url: string | URL, init?: WireRequest) => Promise<WireResponse>;

/**
 * The transport's fetch typed as the proxmox-api package's: the package reads only status,
 * statusText, headers.get(), json() and text() of an answer (ProxmoxEngine.doRequest and
 * getTicket, 1.1.x), and sends method, string headers, a string body and a signal.
 */
export const packageFetch = (fetch: FetchLike) => fetch as unknown as NonNullable<ProxmoxEngineOptions['fetch']>;

export interface Transport {
  fetch: FetchLike;
  /** Runs fn with `signal` as the cancellation of every request fn makes. */
  withSignal<T>(signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/**
 * How long an idle pooled connection is kept. pveproxy closes a keep-alive connection after 5 s
 * without activity (pve-http-server's handle timeout) and does not announce it in a Keep-Alive
 * header; a request sent as it does so meets a reset. Its clock starts when it writes the
 * answer, ours after we read it, so ours must be shorter by a margin for latency and a busy loop.
 */
export const IDLE_SOCKET_TIMEOUT_MS = 2_500;

/** pveproxy gzips answers over 1 KiB to a client that accepts it; small ones inflate inline. */
const INLINE_GUNZIP_MAX = 256 * 1024;
/** An answer inflating beyond this is refused (no call of the driver reads anything near it). */
const MAX_ANSWER_BYTES = 256 * 1024 * 1024;

type UndiciPart = Pick<typeof import('undici'), 'Agent' | 'buildConnector'>;

export function createTransport(o: TransportOptions): Transport {
  // undici is imported on the first request, not when the controller is built: ~30-50 ms of CPU
  // off the start path (docs/performance.md, start-up). A failed import is not kept.
  let agent: Promise<Agent> | undefined;
  const agentOf = (): Promise<Agent> =>
    (agent ??= import('undici').then(
      // undici is CommonJS: the bundle (esbuild) hands its exports over as `default` only.
      (m) => {
        const ns = m as unknown as UndiciPart & { default?: UndiciPart };
        return agentFrom(ns.default ?? ns);
      },
      (e: unknown) => {
        agent = undefined;
        throw e;
      },
    ));
  const agentFrom = (u: UndiciPart): Agent =>
    new u.Agent({
      connections: o.connections,
      keepAliveTimeout: IDLE_SOCKET_TIMEOUT_MS,
      // a server's Keep-Alive hint may shorten it, never lengthen it
      keepAliveMaxTimeout: IDLE_SOCKET_TIMEOUT_MS,
      connect: watchedConnector(
        o.insecure
          ? { rejectUnauthorized: false }
          : o.ca
            ? { ca: o.ca, rejectUnauthorized: true }
            : { rejectUnauthorized: true },
        u.buildConnector,
      ),
    });
  const callSignal = new AsyncLocalStorage<AbortSignal | undefined>();

  const fetch: FetchLike = async (url, init = {}) => {
    const outer = callSignal.getStore();
    const deadline = Date.now() + o.queryTimeoutMs;
    const read = (init.method ?? 'GET').toUpperCase() === 'GET';
    // Each idle-close race uses up one pooled socket and a new connection cannot meet one, so
    // this ends after at most `connections` + 1 attempts.
    for (let attempt = 1; ; attempt++) {
      try {
        const raw = await exchange(await agentOf(), new URL(url), init, outer, deadline - Date.now());
        return answer(raw.status, raw.statusText, raw.headers, await inflate(raw));
      } catch (e) {
        if (read && isIdleReset(e) && !outer?.aborted && Date.now() < deadline && attempt <= o.connections) continue;
        return failed(e, outer);
      }
    }
  };

  /** A 599 answer describing a transport failure (see the header). */
  const failed = (e: unknown, outer: AbortSignal | undefined): WireResponse => {
    const why = outer?.aborted
      ? 'cancelled by caller'
      : e instanceof TimedOut
        ? `timed out after ${o.queryTimeoutMs} ms`
        : describe(e);
    return answer(
      599,
      `${TRANSPORT_MARK} ${why}`.replace(/[^\t\x20-\x7e]/g, ' ').slice(0, 300),
      new Map([['content-type', 'application/json;charset=UTF-8']]),
      Buffer.from(JSON.stringify({ data: null })),
    );
  };

  return {
    fetch,
    withSignal: (signal, fn) => callSignal.run(signal, fn),
    // destroy, not close: close waits for requests in flight (a VM config batch runs without
    // its caller's deadline), and shutdown must not. What was sent may still land; the next
    // start reconciles from Proxmox's state, as after kill -9.
    close: async () => {
      if (agent) await (await agent.catch(() => undefined))?.destroy();
    },
  };
}

class TimedOut extends Error {}

interface RawAnswer {
  status: number;
  statusText: string;
  /** Lower-case names; repeated headers joined with ", " as fetch does. */
  headers: Map<string, string>;
  body: Buffer;
}

/** One HTTP exchange, body included, within `timeoutMs` and until a signal aborts. */
function exchange(
  agent: Agent,
  url: URL,
  init: WireRequest,
  outer: AbortSignal | undefined,
  timeoutMs: number,
): Promise<RawAnswer> {
  return new Promise<RawAnswer>((resolve, reject) => {
    const signals = [init.signal, outer].filter((s): s is AbortSignal => s !== undefined);
    let abortRequest: ((e: Error) => void) | undefined;
    let failure: Error | undefined;
    const stop = (e: Error) => {
      failure ??= e;
      if (abortRequest) abortRequest(failure);
      else finish();
    };
    // Any abort but the caller's is a timeout (the package's own AbortController is one).
    const onAbort = () => stop(outer?.aborted ? new Error('cancelled by caller') : new TimedOut());
    const timer = setTimeout(() => stop(new TimedOut()), timeoutMs);
    for (const s of signals) s.addEventListener('abort', onAbort, { once: true });
    let settled = false;
    const finish = (ok?: RawAnswer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      for (const s of signals) s.removeEventListener('abort', onAbort);
      if (ok && !failure) resolve(ok);
      else reject(failure ?? new Error('no answer'));
    };
    if (signals.some((s) => s.aborted)) {
      onAbort();
      return;
    }
    let status = 0;
    let statusText = '';
    const headers = new Map<string, string>();
    const chunks: Buffer[] = [];
    agent.dispatch(
      {
        origin: url.origin,
        path: url.pathname + url.search,
        method: (init.method ?? 'GET') as Dispatcher.HttpMethod,
        headers: { ...init.headers, 'accept-encoding': 'gzip' },
        body: init.body ?? null,
      },
      {
        onConnect(abort) {
          abortRequest = abort;
          if (failure) abort(failure);
        },
        onError(e) {
          failure ??= e;
          finish();
        },
        onHeaders(code, raw, _resume, text) {
          status = code;
          statusText = text;
          headers.clear();
          for (let i = 0; i + 1 < raw.length; i += 2) {
            const name = (raw[i] as Buffer).toString('latin1').toLowerCase();
            const value = (raw[i + 1] as Buffer).toString('latin1');
            const prev = headers.get(name);
            headers.set(name, prev === undefined ? value : `${prev}, ${value}`);
          }
          return true;
        },
        onData(chunk) {
          chunks.push(chunk);
          return true;
        },
        onComplete() {
          finish({ status, statusText, headers, body: Buffer.concat(chunks) });
        },
      },
    );
  });
}

async function inflate(raw: RawAnswer): Promise<Buffer> {
  if (!/^\s*gzip\s*$/i.test(raw.headers.get('content-encoding') ?? '') || raw.body.length === 0) return raw.body;
  raw.headers.delete('content-encoding');
  raw.headers.delete('content-length');
  const opts = { maxOutputLength: MAX_ANSWER_BYTES };
  if (raw.body.length <= INLINE_GUNZIP_MAX) return gunzipSync(raw.body, opts);
  return new Promise<Buffer>((resolve, reject) => {
    gunzip(raw.body, opts, (e, out) => (e ? reject(e) : resolve(out)));
  });
}

function answer(status: number, statusText: string, headers: Map<string, string>, body: Buffer): WireResponse {
  const text = () => body.toString('utf8');
  return {
    status,
    statusText,
    ok: status >= 200 && status < 300,
    headers: { get: (name) => headers.get(name.toLowerCase()) ?? null },
    body: null,
    text: () => Promise.resolve(text()),
    json: async () => JSON.parse(text()) as unknown,
  };
}

/** The error chain of a failed exchange as one line, with the system error codes. */
function describe(e: unknown): string {
  const parts: string[] = [];
  let cur: unknown = e;
  for (let i = 0; cur instanceof Error && i < 4; i++) {
    const code = (cur as { code?: unknown }).code;
    const msg = cur.message;
    if (msg && msg !== 'fetch failed')
      parts.push(typeof code === 'string' && !msg.includes(code) ? `${msg} (${code})` : msg);
    cur = cur.cause;
  }
  return parts.join(': ') || 'connection failed';
}
