// Addresses as configuration names them: CSI endpoints as a cluster writes them
// (`unix:///csi/csi.sock`) or as tests do (`tcp://127.0.0.1:PORT`), and the metrics listen
// address (`host:port`). Parsing lives here, below the server, so the configuration is checked
// before any socket code is loaded (prom-client only with metrics on, grpc-js only to serve).
import path from 'node:path';
import { defined } from '../defined.js';

export type Endpoint = { kind: 'unix'; path: string } | { kind: 'tcp'; host: string; port: number };

export function parseEndpoint(raw: string): Endpoint {
  const unix = /^unix:(?:\/\/)?(\/.+)$/.exec(raw) ?? (raw.startsWith('/') ? [raw, raw] : null);
  if (unix) return { kind: 'unix', path: path.normalize(unix[1]) };
  const tcp = /^tcp:\/\/([^/:]+|\[[0-9a-fA-F:]+\]):(\d{1,5})\/?$/.exec(raw);
  if (tcp) {
    const port = Number(tcp[2]);
    if (port <= 65535)
      return {
        kind: 'tcp',
        host: defined(tcp[1], 'host of the tcp:// endpoint pattern').replace(/^\[|\]$/g, ''),
        port,
      };
  }
  throw new Error(`"${raw}" is not an endpoint: use unix:///absolute/path.sock or tcp://127.0.0.1:PORT`);
}

export const formatEndpoint = (e: Endpoint): string =>
  e.kind === 'unix' ? `unix://${e.path}` : `tcp://${e.host}:${e.port}`;

/** `host:port` of a listen address (IPv6 in brackets; no host = all interfaces). */
export function splitHostPort(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  const host = i > 0 ? address.slice(0, i).replace(/^\[|\]$/g, '') : '0.0.0.0';
  const port = Number(address.slice(i + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`bad port in ${address}`);
  return { host, port };
}
