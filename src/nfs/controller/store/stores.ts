// Which NFS version the controller speaks to a server. A StorageClass's mountOptions
// (`nfsvers=`/`vers=`, as the node's mount.nfs reads them) choose it at CreateVolume; calls that
// carry no mount options (DeleteVolume, ValidateVolumeCapabilities…) and classes without a version
// try NFSv3 first (portmapper + MOUNT, what csi-driver-nfs users have) and NFSv4 when the server
// has no v3 service at all. Once v3 answered a server, auto calls stay with it; a fall back to v4
// is a decision that is re-checked: after `versionRecheckMs` the next call tries v3 again, so one
// MOUNT that failed while the NAS restarted does not move a server to v4 for good.
import type { Logger } from 'pino';
import { CsiError, isCsiError } from '../../../errors.js';
import { MountStatusError, NfsStatusError } from '../../client/status.js';
import { createNfs3Stores } from './nfs3-store.js';
import { createNfs4Stores } from './nfs4-store.js';
import type { NfsStore, NfsStores, NfsVersion } from './store.js';

/** The NFSv4 minor version a class's `nfsvers=4.x` pins (`4` alone lets the client negotiate). */
const MINOR = { '4.0': 0, '4.1': 1, '4.2': 2 } as const;

/** The version a mount option list asks for; undefined when it names none. */
export function nfsVersionOf(mountOptions: readonly string[]): NfsVersion | undefined {
  let v: string | undefined;
  for (const flag of mountOptions) {
    for (const o of flag.split(',')) {
      const m = /^\s*(?:nfsvers|vers)=(\S+)\s*$/.exec(o);
      if (m) v = m[1]; // the last one wins, as in mount.nfs
    }
  }
  if (v === undefined) return undefined;
  if (v === '3') return '3';
  if (v === '4') return '4';
  if (v === '4.0') return '4.0';
  if (v === '4.1') return '4.1';
  if (/^4\.[2-9]$/.test(v)) return '4.2'; // the newest minor version there is
  return undefined; // v2 and unknown values: the node's mount decides; here v3 then v4
}

/** A v3 failure that means "no v3 service here", as opposed to an answer from one. */
function noV3(e: unknown): boolean {
  if (e instanceof NfsStatusError || e instanceof MountStatusError) return false;
  return isCsiError(e, 'Unavailable') || isCsiError(e, 'DeadlineExceeded') || isCsiError(e, 'FailedPrecondition');
}

export interface NfsStoresOptions {
  timeoutMs: number;
  nfsPort?: number | undefined;
  mountPort?: number | undefined;
  privilegedPort?: boolean | undefined;
  log?: Logger | undefined;
  /** How long a fall back to NFSv4 holds before v3 is tried again; default 5 min. */
  versionRecheckMs?: number | undefined;
  now?: () => number;
}

export function createNfsStores(opts: NfsStoresOptions): NfsStores {
  // One client per server and version, so a probe pings each server in the version it speaks.
  const clients = new Map<string, NfsStores>();
  const clientOf = (server: string, v: NfsVersion): NfsStores => {
    const key = `${v}\u0000${server}`;
    let c = clients.get(key);
    if (!c) {
      c = v === '3' ? createNfs3Stores(opts) : createNfs4Stores({ ...opts, ...(v !== '4' && { minor: MINOR[v] }) });
      clients.set(key, c);
    }
    return c;
  };
  const recheckMs = opts.versionRecheckMs ?? 5 * 60_000;
  const now = opts.now ?? Date.now;
  // v4 entries carry when they were decided: they hold for recheckMs, then v3 is tried again.
  const decided = new Map<string, { v: '3' | '4'; at: number }>();
  const learned = {
    get: (server: string): '3' | '4' | undefined => {
      const d = decided.get(server);
      if (d?.v === '4' && now() - d.at >= recheckMs) return undefined;
      return d?.v;
    },
    set: (server: string, v: '3' | '4') => void decided.set(server, { v, at: now() }),
  };
  const servers = new Map<string, NfsVersion | 'auto'>();

  /** Runs `fn` in the server's version, finding it out first when nobody said. */
  async function autoRun<T>(server: string, fn: (v: '3' | '4') => Promise<T>): Promise<T> {
    const known = learned.get(server);
    if (known) return fn(known);
    try {
      const r = await fn('3');
      learned.set(server, '3');
      return r;
    } catch (e3) {
      if (!noV3(e3)) {
        learned.set(server, '3');
        throw e3;
      }
      try {
        const r = await fn('4');
        opts.log?.info({ server }, 'NFS server has no usable NFSv3 service; using NFSv4');
        learned.set(server, '4');
        return r;
      } catch (e4) {
        if (e4 instanceof CsiError && (e4.kind === 'Unavailable' || e4.kind === 'DeadlineExceeded')) {
          throw new CsiError(
            e4.kind,
            `NFS server ${server} answered neither NFSv3 (${(e3 as Error).message}) nor NFSv4 (${e4.message})`,
            { cause: e4 },
          );
        }
        learned.set(server, '4');
        throw e4;
      }
    }
  }

  function auto(server: string, share: string): NfsStore {
    const stores = { '3': clientOf(server, '3').open(server, share), '4': clientOf(server, '4').open(server, share) };
    const run = <T>(fn: (s: NfsStore) => Promise<T>) => autoRun(server, (v) => fn(stores[v]));
    return {
      server,
      share,
      ensureDir: (p, a, o) => run((s) => s.ensureDir(p, a, o)),
      stat: (p, o) => run((s) => s.stat(p, o)),
      list: (p, o) => run((s) => s.list(p, o)),
      removeTree: (p, o) => run((s) => s.removeTree(p, o)),
      removeDirIfEmpty: (p, o) => run((s) => s.removeDirIfEmpty(p, o)),
      rename: (f, t, o) => run((s) => s.rename(f, t, o)),
      statfs: (o) => run((s) => s.statfs(o)),
      copyTree: (f, t, o) => run((s) => s.copyTree(f, t, o)),
      unpackArchive: (f, t, o) => run((s) => s.unpackArchive(f, t, o)),
    };
  }

  return {
    open: (server, share, version) => {
      if (!servers.has(server) || version) servers.set(server, version ?? 'auto');
      return version ? clientOf(server, version).open(server, share) : auto(server, share);
    },
    health: async (signal) => {
      // Each server in the version it speaks (or is asked in); a version never tried is not a backend.
      const per = await Promise.all(
        [...servers].map(([server, v]) => {
          const ver = v === 'auto' ? (learned.get(server) ?? '3') : v;
          return clientOf(server, ver).health(signal);
        }),
      );
      return per.flat();
    },
    servers: () => [...new Set([...clients.values()].flatMap((c) => c.servers()))],
    ping: async (signal) => {
      await Promise.all(
        [...servers].map(([server, v]) =>
          v === 'auto' ? autoRun(server, (x) => clientOf(server, x).ping(signal)) : clientOf(server, v).ping(signal),
        ),
      );
    },
    close: async () => {
      await Promise.all([...clients.values()].map((c) => c.close()));
      clients.clear();
    },
  };
}
