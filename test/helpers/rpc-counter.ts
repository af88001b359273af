// A TCP relay in front of an ONC RPC server that counts the calls going through it, by procedure:
// the program under test is pointed at the relay's port (--nfs-port), so what is counted is what
// really went over the wire, not what the code meant to send. Record marking (RFC 5531 §11): a
// 4-byte header per fragment, the high bit marking a record's last one; a call's header carries
// xid, msg_type (0 = CALL), rpcvers, prog, vers, proc.
import net from 'node:net';

const NFS3_PROCS = [
  'NULL',
  'GETATTR',
  'SETATTR',
  'LOOKUP',
  'ACCESS',
  'READLINK',
  'READ',
  'WRITE',
  'CREATE',
  'MKDIR',
  'SYMLINK',
  'MKNOD',
  'REMOVE',
  'RMDIR',
  'RENAME',
  'LINK',
  'READDIR',
  'READDIRPLUS',
  'FSSTAT',
  'FSINFO',
  'PATHCONF',
  'COMMIT',
];

export interface RpcCounter {
  port: number;
  /** Calls since the last reset, by procedure name. */
  counts(): Map<string, number>;
  total(): number;
  reset(): void;
  close(): Promise<void>;
}

export async function startRpcCounter(targetPort: number, host = '127.0.0.1'): Promise<RpcCounter> {
  const counts = new Map<string, number>();
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, host);
    sockets.add(client).add(upstream);
    for (const s of [client, upstream]) s.on('close', () => sockets.delete(s));
    let buf: Buffer = Buffer.alloc(0);
    let first: Buffer | undefined; // the first fragment of the record being read
    client.on('data', (d: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, d]) : d;
      while (buf.length >= 4) {
        const hdr = buf.readUInt32BE(0);
        const len = hdr & 0x7fffffff;
        if (buf.length < 4 + len) break;
        first ??= buf.subarray(4, 4 + len);
        buf = buf.subarray(4 + len);
        if (hdr & 0x80000000) {
          if (first.length >= 24 && first.readUInt32BE(4) === 0) {
            const proc = first.readUInt32BE(20);
            const name = NFS3_PROCS[proc] ?? `proc ${proc}`;
            counts.set(name, (counts.get(name) ?? 0) + 1);
          }
          first = undefined;
        }
      }
    });
    client.pipe(upstream).pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end);
    upstream.on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    counts: () => new Map(counts),
    total: () => [...counts.values()].reduce((a, b) => a + b, 0),
    reset: () => counts.clear(),
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
