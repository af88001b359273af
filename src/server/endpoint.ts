// CSI endpoints as a cluster writes them (`unix:///csi/csi.sock`) or as tests do
// (`tcp://127.0.0.1:PORT`), turned into what grpc-js binds.
import fs from 'node:fs';
import net from 'node:net';
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

export function grpcAddress(e: Endpoint): string {
  return e.kind === 'unix' ? `unix://${e.path}` : `${e.host.includes(':') ? `[${e.host}]` : e.host}:${e.port}`;
}

export const formatEndpoint = (e: Endpoint): string =>
  e.kind === 'unix' ? `unix://${e.path}` : `tcp://${e.host}:${e.port}`;

/**
 * A socket file left by a process that died is removed; one that still accepts connections
 * belongs to a live process and is left alone (binding then fails with a clear error).
 */
export async function removeStaleSocket(socketPath: string): Promise<void> {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(socketPath);
  } catch {
    fs.mkdirSync(path.dirname(socketPath), { recursive: true });
    return;
  }
  if (!st.isSocket()) throw new Error(`${socketPath} exists and is not a socket; refusing to replace it`);
  const alive = await new Promise<boolean>((resolve) => {
    const s = net.connect(socketPath);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
  if (alive) throw new Error(`${socketPath} is in use by a running process`);
  fs.unlinkSync(socketPath);
}
