// A parsed CSI endpoint (src/config/endpoint.ts) turned into what grpc-js binds, and the stale
// socket file of a dead process cleared before binding.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Endpoint } from '../config/endpoint.js';

export function grpcAddress(e: Endpoint): string {
  return e.kind === 'unix' ? `unix://${e.path}` : `${e.host.includes(':') ? `[${e.host}]` : e.host}:${e.port}`;
}

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
