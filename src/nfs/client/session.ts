// Everything the controller keeps per NFS server: one NFS connection and one MOUNT connection
// (ports from the portmapper unless overridden), and the root file handle of each share used.
import type { Logger } from 'pino';
import { FailedPrecondition, isCsiError } from '../../errors.js';
import { exportList, lookupPort, MOUNT_PROGRAM, MOUNT_V3, mountPath } from './mount.js';
import { Nfs3Client, NFS_PROGRAM, NFS_V3, type RpcTransport } from './nfs3.js';
import { RpcConnection, type RpcCall } from './rpc.js';
import { isNfsStatus, MountStatusError, NFS3ERR } from './status.js';
import type { XdrReader } from './xdr.js';

export interface SessionOptions {
  server: string;
  timeoutMs: number;
  /** Fixed ports skip the portmapper (test servers on non-standard ports, firewalled NAS). */
  nfsPort?: number | undefined;
  mountPort?: number | undefined;
  privilegedPort?: boolean | undefined;
  log?: Logger | undefined;
}

type Service = 'nfs' | 'mount';

export class NfsSession {
  readonly nfs: Nfs3Client;
  private readonly conns = new Map<Service, Promise<RpcConnection>>();
  private readonly roots = new Map<string, Promise<Buffer>>();
  /** Calls in flight and when the last one ended: an idle session is closed (nfs3-store.ts). */
  busy = 0;
  lastUsed = Date.now();

  constructor(private readonly opts: SessionOptions) {
    this.nfs = new Nfs3Client(this.transport('nfs'), opts.server);
  }

  /** Root handle of `share` (absolute server path), cached until invalidated. */
  rootHandle(share: string, signal?: AbortSignal): Promise<Buffer> {
    let p = this.roots.get(share);
    if (!p) {
      p = this.mountShare(share, signal);
      this.roots.set(share, p);
      p.catch(() => this.roots.delete(share));
    }
    return p;
  }

  /** The server's export list, asked now (MOUNT EXPORT). */
  exports(signal?: AbortSignal): Promise<string[]> {
    return exportList(this.transport('mount'), signal);
  }

  invalidateRoot(share: string): void {
    this.roots.delete(share);
  }

  close(): void {
    for (const c of this.conns.values())
      c.then(
        (x) => x.close(),
        () => {},
      );
    this.conns.clear();
    this.roots.clear();
  }

  private transport(svc: Service): RpcTransport {
    return {
      call: async (c: RpcCall): Promise<XdrReader> => {
        this.busy++;
        try {
          const conn = await this.connection(svc, c.signal);
          return await conn.call(c);
        } catch (e) {
          // A discovered port may change when the server restarts; look it up again next time.
          if (isCsiError(e, 'Unavailable') && this.fixedPort(svc) === undefined && this.conns.get(svc)) {
            const cur = this.conns.get(svc);
            this.conns.delete(svc);
            cur?.then(
              (x) => x.close(),
              () => {},
            );
          }
          throw e;
        } finally {
          this.busy--;
          this.lastUsed = Date.now();
        }
      },
    };
  }

  private fixedPort(svc: Service): number | undefined {
    return svc === 'nfs' ? this.opts.nfsPort : this.opts.mountPort;
  }

  private connection(svc: Service, signal?: AbortSignal): Promise<RpcConnection> {
    let p = this.conns.get(svc);
    if (!p) {
      p = this.resolvePort(svc, signal).then(
        (port) =>
          new RpcConnection({
            host: this.opts.server,
            port,
            label: svc === 'nfs' ? 'NFS' : 'MOUNT',
            timeoutMs: this.opts.timeoutMs,
            privilegedPort: this.opts.privilegedPort,
            log: this.opts.log,
          }),
      );
      this.conns.set(svc, p);
      p.catch(() => this.conns.delete(svc));
    }
    return p;
  }

  private async resolvePort(svc: Service, signal?: AbortSignal): Promise<number> {
    const fixed = this.fixedPort(svc);
    if (fixed) return fixed;
    const base = {
      host: this.opts.server,
      timeoutMs: this.opts.timeoutMs,
      privilegedPort: this.opts.privilegedPort,
      log: this.opts.log,
    };
    if (svc === 'mount') return lookupPort(base, MOUNT_PROGRAM, MOUNT_V3, signal);
    try {
      return await lookupPort(base, NFS_PROGRAM, NFS_V3, signal);
    } catch (e) {
      this.opts.log?.debug(
        { server: this.opts.server, err: (e as Error).message },
        'portmapper lookup for NFS failed; using 2049',
      );
      return 2049;
    }
  }

  /**
   * MNT the share itself; servers that only export a parent (ganesha without sub-path mounts,
   * some NAS setups) get the nearest exported ancestor mounted and the rest looked up.
   */
  private async mountShare(share: string, signal?: AbortSignal): Promise<Buffer> {
    try {
      return await this.mountNearest(share, signal);
    } catch (e) {
      // A missing share is a configuration problem of the StorageClass or PV, not a missing volume.
      if (isNfsStatus(e, NFS3ERR.NOENT, NFS3ERR.NOTDIR) || (e instanceof MountStatusError && e.kind === 'NotFound')) {
        throw new FailedPrecondition(
          `NFS server ${this.opts.server} has no exported directory ${share}: ${e.message}`,
          { cause: e },
        );
      }
      throw e;
    }
  }

  private async mountNearest(share: string, signal?: AbortSignal): Promise<Buffer> {
    const mount = this.transport('mount');
    const segs = share.split('/').filter(Boolean);
    let first: unknown;
    for (let keep = segs.length; keep >= 0; keep--) {
      const path = '/' + segs.slice(0, keep).join('/');
      try {
        let fh = await mountPath(mount, this.opts.server, path, signal);
        for (const [i, seg] of segs.entries()) {
          if (i < keep) continue;
          const where = '/' + segs.slice(0, i + 1).join('/');
          const r = await this.nfs.lookup(fh, seg, { signal, path: where });
          fh = r.handle;
        }
        return fh;
      } catch (e) {
        first ??= e;
        if (!(e instanceof MountStatusError) || (e.kind !== 'NotFound' && e.kind !== 'FailedPrecondition')) throw e;
      }
    }
    throw first;
  }
}
