// Persistent connections as pveproxy keeps them (pve-http-server, PVE/APIServer/AnyEvent.pm):
// - the handle's inactivity timeout (`timeout`, 5 s by default; pveproxy sets none) is re-armed
//   when a response is written; an idle keep-alive connection is closed when it fires, with a TLS
//   close_notify (stoptls) and a FIN (shutdown), and the socket is then gone: a request sent onto
//   it afterwards meets a reset. A fresh connection that sends nothing is closed the same way.
// - the answer says `Connection: Keep-Alive` and no `Keep-Alive: timeout=…`, so a client cannot
//   learn the timeout from the server;
// - `keep_alive => 100` (pveproxy): the 100th request on a connection is answered with
//   `Connection: close`. Errors (status >= 400) close as well (server.ts).
import type { Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** pve-http-server's default handle timeout (seconds in Perl). */
export const PVEPROXY_IDLE_TIMEOUT_MS = 5_000;
/** pveproxy's `keep_alive`: requests per connection. */
export const PVEPROXY_KEEP_ALIVE_REQUESTS = 100;

export interface ConnectionStats {
  opened: number;
  /** Closed by the server's inactivity timeout. */
  closedIdle: number;
  /** Closed by the client (FIN received while idle). */
  closedByClient: number;
}

interface ConnState {
  requests: number;
  timer: NodeJS.Timeout | undefined;
  busy: boolean;
}

export function pveproxyKeepAlive(server: Server, idleMs = PVEPROXY_IDLE_TIMEOUT_MS): { stats: ConnectionStats } {
  // Node's own keep-alive timer also announces itself in a Keep-Alive header; pveproxy does neither.
  server.keepAliveTimeout = 0;
  const stats: ConnectionStats = { opened: 0, closedIdle: 0, closedByClient: 0 };
  const conns = new WeakMap<Socket, ConnState>();

  const arm = (socket: Socket, st: ConnState) => {
    clearTimeout(st.timer);
    st.timer = setTimeout(() => {
      if (st.busy || socket.destroyed) return;
      stats.closedIdle++;
      socket.destroySoon(); // close_notify + FIN, then the fd is closed
    }, idleMs);
    st.timer.unref();
  };

  server.on('secureConnection', (socket: Socket) => {
    const st: ConnState = { requests: 0, timer: undefined, busy: false };
    conns.set(socket, st);
    stats.opened++;
    arm(socket, st);
    socket.on('end', () => {
      if (!st.busy) stats.closedByClient++;
    });
    socket.on('close', () => clearTimeout(st.timer));
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket;
    const st = conns.get(socket);
    if (!st) return;
    st.busy = true;
    clearTimeout(st.timer);
    if (++st.requests >= PVEPROXY_KEEP_ALIVE_REQUESTS) res.setHeader('Connection', 'close');
    res.on('finish', () => {
      st.busy = false;
      arm(socket, st);
    });
  });
  return { stats };
}
