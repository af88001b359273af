// The one failure a read may be sent again for: the idle-close race with pveproxy. pveproxy
// closes a keep-alive connection after 5 s without a request and does not announce it; a request
// written onto a pooled socket just as the server closes it meets the close (a reset, or the
// other side's FIN) before a single byte of an answer. The server never read it, so a GET can go
// out once more on a new connection. Nothing else qualifies: a reset on a fresh connection (the
// server or something between refused this very request), a close after part of an answer (the
// server was answering), a timeout or an HTTP error all surface to the caller.
// undici says neither which socket carried a request nor whether it was reused, so this watches
// its diagnostics channels: a request's headers going out on a socket of ours (which socket, how
// many requests it had carried, how many answer bytes it had read), then the request's error.
import diagnostics from 'node:diagnostics_channel';
import type { Socket } from 'node:net';
import type { buildConnector } from 'undici';

interface Sent {
  socket: Socket;
  /** The socket had carried a request before this one. */
  reused: boolean;
  /** socket.bytesRead (answer bytes, after TLS) when this request's headers went out. */
  readAtSend: number;
}

/** Sockets our connectors made, with how many requests each has carried. */
const requestsOn = new WeakMap<Socket, number>();
/** undici requests sent on one of our sockets (undici's Request objects, as the channels name them). */
const sentOn = new WeakMap<object, Sent>();
/** Errors that ended a request in the idle-close race (the error objects undici reported). */
const idleResets = new WeakSet<object>();

const RESET_CODES = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET']);

let watching = false;
function watch(): void {
  if (watching) return;
  watching = true;
  diagnostics.subscribe('undici:client:sendHeaders', (m) => {
    const { request, socket } = m as { request: object; socket: Socket };
    const carried = requestsOn.get(socket);
    if (carried === undefined) return;
    requestsOn.set(socket, carried + 1);
    sentOn.set(request, { socket, reused: carried > 0, readAtSend: socket.bytesRead });
  });
  diagnostics.subscribe('undici:request:error', (m) => {
    const { request, error } = m as { request: object; error: unknown };
    const sent = sentOn.get(request);
    if (!sent || typeof error !== 'object' || error === null) return;
    const code = (error as { code?: unknown }).code;
    if (sent.reused && sent.socket.bytesRead === sent.readAtSend && typeof code === 'string' && RESET_CODES.has(code))
      idleResets.add(error);
  });
}

/**
 * An undici connector (the Agent's `connect`) whose sockets are watched for the race. `build` is
 * undici's buildConnector (undici is imported on the first request, not at start: transport.ts).
 */
export function watchedConnector(
  options: buildConnector.BuildOptions,
  build: typeof buildConnector,
): buildConnector.connector {
  watch();
  const connect = build(options);
  return (opts, callback) => {
    connect(opts, (...args) => {
      const socket = args[1];
      if (socket) requestsOn.set(socket, 0);
      callback(...args);
    });
  };
}

/** Whether a failed fetch ended in the idle-close race (the error or one of its causes). */
export function isIdleReset(e: unknown): boolean {
  let cur: unknown = e;
  for (let i = 0; i < 4 && typeof cur === 'object' && cur !== null; i++) {
    if (idleResets.has(cur)) return true;
    cur = (cur as { cause?: unknown }).cause;
  }
  return false;
}
