// Portmapper v2 GETPORT (RFC 1833) and MOUNT v3 MNT (RFC 1813 appendix I): how an NFSv3 client
// finds the server's ports and the root file handle of an exported path; EXPORT lists them.
import { Unavailable } from '../../errors.js';
import type { RpcTransport } from './nfs3.js';
import { RpcConnection, type RpcConnectionOptions } from './rpc.js';
import { MountStatusError } from './status.js';
import { XdrWriter } from './xdr.js';

export const PORTMAP_PORT = 111;
export const MOUNT_PROGRAM = 100005;
export const MOUNT_V3 = 3;
const IPPROTO_TCP = 6;

/** Asks the server's portmapper for the TCP port of `prog`/`vers`; one short-lived connection. */
export async function lookupPort(
  opts: Omit<RpcConnectionOptions, 'port' | 'label'>,
  prog: number,
  vers: number,
  signal?: AbortSignal,
): Promise<number> {
  const pm = new RpcConnection({ ...opts, port: PORTMAP_PORT, label: 'portmapper' });
  try {
    const r = await pm.call({
      prog: 100000,
      vers: 2,
      proc: 3, // GETPORT
      name: 'GETPORT',
      args: new XdrWriter().u32(prog).u32(vers).u32(IPPROTO_TCP).u32(0).bytes(),
      signal,
    });
    const port = r.u32();
    if (port === 0 || port > 65535) {
      throw new Unavailable(
        `NFS server ${opts.host} has no TCP service for RPC program ${prog} v${vers} registered with its portmapper`,
      );
    }
    return port;
  } finally {
    pm.close();
  }
}

/** MNT: the root file handle of an exported directory (or a directory below an export). */
export async function mountPath(
  rpc: RpcTransport,
  server: string,
  path: string,
  signal?: AbortSignal,
): Promise<Buffer> {
  const r = await rpc.call({
    prog: MOUNT_PROGRAM,
    vers: MOUNT_V3,
    proc: 1,
    name: 'MNT',
    args: new XdrWriter().string(path).bytes(),
    signal,
  });
  const status = r.u32();
  if (status !== 0) throw new MountStatusError(status, path, server);
  return r.opaque(64);
  // The auth flavour list that follows is not checked: a server that refuses AUTH_SYS answers
  // the first NFS call with AUTH_ERROR, which rpc.ts reports clearly.
}

/** EXPORT: the directories the server exports (the ownership gate's boundaries on NFSv3). */
export async function exportList(rpc: RpcTransport, signal?: AbortSignal): Promise<string[]> {
  const r = await rpc.call({ prog: MOUNT_PROGRAM, vers: MOUNT_V3, proc: 5, name: 'EXPORT', signal });
  const out: string[] = [];
  while (r.bool()) {
    out.push(r.string(1024));
    while (r.bool()) r.string(255); // the groups it is exported to
  }
  return out;
}
