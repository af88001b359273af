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
import { AsyncLocalStorage } from 'node:async_hooks';
import { Agent, fetch as undiciFetch, Response, type RequestInit } from 'undici';
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

export type FetchLike = (url: string | URL, init?: RequestInit) => Promise<Response>;

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

export function createTransport(o: TransportOptions): Transport {
  const agent = new Agent({
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
    ),
  });
  const callSignal = new AsyncLocalStorage<AbortSignal | undefined>();

  const fetch: FetchLike = async (url, init) => {
    const signals = [AbortSignal.timeout(o.queryTimeoutMs)];
    if (init?.signal) signals.push(init.signal);
    const outer = callSignal.getStore();
    if (outer) signals.push(outer);
    const signal = AbortSignal.any(signals);
    const read = (init?.method ?? 'GET').toUpperCase() === 'GET';
    // Each idle-close race uses up one pooled socket and a new connection cannot meet one, so
    // this ends after at most `connections` + 1 attempts.
    for (let attempt = 1; ; attempt++) {
      try {
        return await exchange(url, { ...init, dispatcher: agent, signal });
      } catch (e) {
        if (read && isIdleReset(e) && !signal.aborted && attempt <= o.connections) continue;
        return failed(e, signal, outer);
      }
    }
  };

  /** A 599 answer describing a transport failure (see the header). */
  const failed = (e: unknown, signal: AbortSignal, outer: AbortSignal | undefined): Response => {
    const why = outer?.aborted
      ? 'cancelled by caller'
      : signal.aborted
        ? `timed out after ${o.queryTimeoutMs} ms`
        : describe(e);
    return new Response(JSON.stringify({ data: null }), {
      status: 599,
      statusText: `${TRANSPORT_MARK} ${why}`.replace(/[^\t\x20-\x7e]/g, ' ').slice(0, 300),
      headers: { 'content-type': 'application/json;charset=UTF-8' },
    });
  };

  return {
    fetch,
    withSignal: (signal, fn) => callSignal.run(signal, fn),
    // destroy, not close: close waits for requests in flight (a VM config batch runs without
    // its caller's deadline), and shutdown must not. What was sent may still land; the next
    // start reconciles from Proxmox's state, as after kill -9.
    close: () => agent.destroy(),
  };
}

/** One HTTP exchange, its body read inside the caller's signal. */
async function exchange(url: string | URL, init: RequestInit): Promise<Response> {
  const res = await undiciFetch(url, init);
  // Bytes, not a string: a string body makes undici add `text/plain`, and the package would
  // then throw on the content type instead of reading pveproxy's answers that have none (a
  // 401 "invalid PVE ticket", a bare "proxy loop detected", 595/596 from proxying).
  const body = new Uint8Array(await res.arrayBuffer());
  return new Response(body.length === 0 ? null : body, {
    status: res.status,
    statusText: res.statusText,
    headers: res.headers,
  });
}

/** The error chain of a failed fetch as one line, with the system error codes. */
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
