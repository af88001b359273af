// NfsStore over the NFSv3 protocol client. Paths are walked from the share's root handle with
// LOOKUP on every operation (no handle cache besides the root), so a directory renamed or
// removed by someone else is never acted on through an old handle. A stale root handle (server
// restarted with new handles, export re-created) is re-mounted and the operation redone once.
import type { Logger } from 'pino';
import { FailedPrecondition } from '../../../errors.js';
import type { Fattr, Sattr } from '../../client/nfs3.js';
import { NfsSession, type SessionOptions } from '../../client/session.js';
import { isNfsStatus, isStale, NFS3ERR } from '../../client/status.js';
import { ProtocolStore, type RenameSteps, attrsToChange, nullHealth } from './protocol-store.js';
import type {
  DirAttrs,
  FsStat,
  InspectOptions,
  NfsDirEntry,
  NfsStat,
  NfsStores,
  OpOptions,
  PathFacts,
  Permit,
  RawNfsStore,
  RmdirResult,
} from './store.js';
import { lastOf, pathSegments as segments } from './store.js';
import { admitted, boundaryError, gated } from './ownership.js';
import { type CopyStats, slotsFor, TreeCopy } from '../copy/copy-tree.js';
import { copyAttrs, nfs3Sink, nfs3Source, nfs3UnpackSink } from '../copy/nfs3-copy.js';
import { unpackTar } from '../copy/tar-unpack.js';
import type { CopyTreeOptions } from './store.js';
import { AlreadyExists } from '../../../errors.js';

const DEFAULT_DIR_MODE = 0o755;
const ENSURE_ATTEMPTS = 4;

const toStat = (a: Fattr): NfsStat => ({
  type: a.type,
  mode: a.mode,
  uid: a.uid,
  gid: a.gid,
  size: a.size,
  mtimeMs: a.mtimeMs,
  ctimeMs: a.ctimeMs,
});

const notFound = (e: unknown) => isNfsStatus(e, NFS3ERR.NOENT);

const STATUS = {
  missing: notFound,
  notDir: (e: unknown) => isNfsStatus(e, NFS3ERR.NOTDIR),
  notEmpty: (e: unknown) => isNfsStatus(e, NFS3ERR.NOTEMPTY, NFS3ERR.EXIST),
  badCookie: (e: unknown) => isNfsStatus(e, NFS3ERR.BAD_COOKIE),
};

export class Nfs3Store extends ProtocolStore<Buffer> implements RawNfsStore {
  constructor(
    private readonly s: NfsSession,
    server: string,
    share: string,
  ) {
    super(server, share, STATUS, {
      readdir: async (dir, cookie, verf, path, signal) => {
        const page = await s.nfs.readdirplus(dir, cookie, verf, { signal, path });
        const entries = page.entries.map((e) => ({
          name: e.name,
          cookie: e.cookie,
          type: e.attrs?.type,
          handle: e.handle,
          fsid: e.attrs && String(e.attrs.fsid),
        }));
        return { entries, eof: page.eof, cookieverf: page.cookieverf };
      },
      lookup: async (dir, name, path, signal) => {
        const r = await s.nfs.lookup(dir, name, { signal, path });
        const a = r.attrs ?? (await s.nfs.getattr(r.handle, { signal }));
        return { handle: r.handle, type: a.type, fsid: String(a.fsid) };
      },
      removeFile: (dir, name, path, signal) => s.nfs.remove(dir, name, { signal, path }),
      removeDir: (dir, name, path, signal) => s.nfs.rmdir(dir, name, { signal, path }),
    });
  }

  private async withRoot<T>(o: OpOptions, fn: (root: Buffer) => Promise<T>): Promise<T> {
    const root = await this.s.rootHandle(this.share, o.signal);
    try {
      return await fn(root);
    } catch (e) {
      if (!isStale(e)) throw e;
      this.s.invalidateRoot(this.share);
      return fn(await this.s.rootHandle(this.share, o.signal));
    }
  }

  private async walk(
    root: Buffer,
    segs: string[],
    o: OpOptions,
  ): Promise<{ handle: Buffer; attrs?: Fattr | undefined }> {
    let cur: { handle: Buffer; attrs?: Fattr | undefined } = { handle: root };
    for (const [i, seg] of segs.entries()) {
      cur = await this.s.nfs.lookup(cur.handle, seg, { signal: o.signal, path: this.where(segs.slice(0, i + 1)) });
    }
    return cur;
  }

  private async attrsOf(h: { handle: Buffer; attrs?: Fattr | undefined }, o: OpOptions): Promise<Fattr> {
    return h.attrs ?? this.s.nfs.getattr(h.handle, { signal: o.signal });
  }

  /** LOOKUP-or-MKDIR of the last component of `here`; `mkdirFirst` chooses which to try first. */
  private async dirStep(dir: Buffer, here: string[], sa: Sattr, mkdirFirst: boolean, o: OpOptions & { fsid: string }) {
    const { name } = lastOf(here);
    const opts = { signal: o.signal, path: this.where(here) };
    const look = async () => {
      const r = await this.s.nfs.lookup(dir, name, opts);
      const a = await this.attrsOf(r, o);
      if (a.type !== 'dir')
        throw new FailedPrecondition(`${this.server}:${opts.path} exists and is a ${a.type}, not a directory`);
      if (String(a.fsid) !== o.fsid) throw boundaryError(this.describe(here));
      return { handle: r.handle, attrs: a, created: false };
    };
    const make = async () => {
      const r = await this.s.nfs.mkdir(dir, name, sa, opts);
      const handle = r.handle ?? (await this.s.nfs.lookup(dir, name, opts)).handle;
      return { handle, attrs: r.attrs ?? (await this.s.nfs.getattr(handle, opts)), created: true };
    };
    if (mkdirFirst) {
      try {
        return await make();
      } catch (e) {
        if (!isNfsStatus(e, NFS3ERR.EXIST)) throw e;
        return look();
      }
    }
    try {
      return await look();
    } catch (e) {
      if (!notFound(e)) throw e;
      try {
        return await make();
      } catch (e2) {
        if (!isNfsStatus(e2, NFS3ERR.EXIST)) throw e2; // created concurrently by someone else
        return look();
      }
    }
  }

  private async mkdirs(root: Buffer, segs: string[], last: DirAttrs | null, o: OpOptions & { fsid: string }) {
    let cur = { handle: root, attrs: undefined as Fattr | undefined, created: false };
    for (let i = 0; i < segs.length; i++) {
      const isLast = last !== null && i === segs.length - 1;
      const sa: Sattr = isLast ? { ...last, mode: last.mode ?? DEFAULT_DIR_MODE } : { mode: DEFAULT_DIR_MODE };
      cur = await this.dirStep(cur.handle, segs.slice(0, i + 1), sa, isLast, o);
    }
    return cur;
  }

  /** The share's fsid (MOUNT hands out only what is inside an export) and the steps below it. */
  async inspect(path: string, o: InspectOptions = {}): Promise<PathFacts> {
    const segs = segments(path, true);
    return this.withRoot(o, async (root) => {
      const a = await this.s.nfs.getattr(root, { signal: o.signal, path: this.share });
      const base = this.share.replace(/\/+$/, '') + '/';
      const exportsBelow = (await this.s.exports(o.signal))
        .map((e) => e.replace(/\/+$/, ''))
        .filter((e) => e.startsWith(base))
        .map((e) => e.slice(base.length));
      const facts: PathFacts = { share: { fsid: String(a.fsid), writable: true }, steps: [], exportsBelow };
      let dir = root;
      for (const [i, name] of segs.entries()) {
        let r;
        try {
          r = await this.s.nfs.lookup(dir, name, { signal: o.signal, path: this.where(segs.slice(0, i + 1)) });
        } catch (e) {
          if (notFound(e)) break;
          throw e;
        }
        const sa = await this.attrsOf(r, o);
        facts.steps.push({ name, type: sa.type, fsid: String(sa.fsid), junction: false });
        if (sa.type !== 'dir') break;
        dir = r.handle;
      }
      await this.walkBelow(facts, segs, dir, o);
      return facts;
    });
  }

  async ensureDir(permit: Permit, attrs: DirAttrs, o: OpOptions = {}): Promise<NfsStat> {
    const { segs, fsid } = admitted(permit, 'create');
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.withRoot(o, async (root) => {
          const d = await this.mkdirs(root, segs, attrs, { ...o, fsid });
          const have = toStat(await this.attrsOf(d, o));
          const want = attrsToChange(have, attrs);
          if (Object.keys(want).length === 0) return have;
          await this.s.nfs.setattr(d.handle, want, { signal: o.signal, path: this.where(segs) });
          return toStat(await this.s.nfs.getattr(d.handle, { signal: o.signal, path: this.where(segs) }));
        });
      } catch (e) {
        // A parent removed between our LOOKUP and MKDIR (another volume's delete cleaning up
        // empty parents) shows up as NOENT or STALE: walk again.
        if (attempt < ENSURE_ATTEMPTS && (notFound(e) || isStale(e))) continue;
        throw e;
      }
    }
  }

  async stat(path: string, o: OpOptions = {}): Promise<NfsStat | null> {
    const segs = segments(path, true);
    try {
      return await this.withRoot(o, async (root) => toStat(await this.attrsOf(await this.walk(root, segs, o), o)));
    } catch (e) {
      if (this.absent(e)) return null;
      throw e;
    }
  }

  async list(path: string, o: OpOptions = {}): Promise<NfsDirEntry[]> {
    const segs = segments(path, true);
    try {
      return await this.withRoot(o, async (root) => {
        const dir = await this.walk(root, segs, o);
        return this.tree.list(dir.handle, segs, o);
      });
    } catch (e) {
      this.notFound(e, segs);
    }
  }

  async removeTree(permit: Permit, o: OpOptions = {}): Promise<boolean> {
    const { segs, fsid } = admitted(permit, 'delete');
    return this.withRoot(o, async (root) => {
      const parentSegs = segs.slice(0, -1);
      const name = lastOf(segs).name;
      const where = { signal: o.signal, path: this.where(segs) };
      let parent: Buffer;
      let target: { handle: Buffer; attrs?: Fattr | undefined };
      try {
        parent = (await this.walk(root, parentSegs, o)).handle;
      } catch (e) {
        if (this.absent(e)) return false;
        throw e;
      }
      // An empty directory (a claim never written to) goes with one RMDIR: 2 round trips fewer
      // than LOOKUP + READDIRPLUS + RMDIR. Anything else (not empty, not a directory) is walked;
      // the one extra round trip is small next to that walk.
      try {
        await this.s.nfs.rmdir(parent, name, where);
        return true;
      } catch (e) {
        if (this.rmdirOutcome(e) === 'missing') return false;
      }
      try {
        target = await this.s.nfs.lookup(parent, name, where);
      } catch (e) {
        if (this.absent(e)) return false;
        throw e;
      }
      const attrs = await this.attrsOf(target, o);
      const t = { handle: target.handle, type: attrs.type, fsid: String(attrs.fsid) };
      await this.tree.removeTree(parent, name, t, segs, { ...o, fsid });
      return true;
    });
  }

  async removeDirIfEmpty(permit: Permit, o: OpOptions = {}): Promise<RmdirResult> {
    const { segs } = admitted(permit, 'rmdir');
    try {
      await this.withRoot(o, async (root) => {
        const parent = await this.walk(root, segs.slice(0, -1), o);
        await this.s.nfs.rmdir(parent.handle, lastOf(segs).name, { signal: o.signal, path: this.where(segs) });
      });
      return 'removed';
    } catch (e) {
      return this.rmdirOutcome(e);
    }
  }

  protected async renameSteps(
    fs: string[],
    ts: string[],
    o: OpOptions & { fsid: string },
    run: <F, T>(steps: RenameSteps<F, T>) => Promise<void>,
  ): Promise<void> {
    const { name: fromName } = lastOf(fs);
    const { name: toName } = lastOf(ts);
    await this.withRoot(o, (root) =>
      run({
        source: async () => {
          const parent = (await this.walk(root, fs.slice(0, -1), o)).handle;
          await this.s.nfs.lookup(parent, fromName, { signal: o.signal, path: this.where(fs) });
          return parent;
        },
        parents: async () => (ts.length > 1 ? (await this.mkdirs(root, ts.slice(0, -1), null, o)).handle : root),
        probe: (toParent) => this.s.nfs.lookup(toParent, toName, { signal: o.signal, path: this.where(ts) }),
        rename: (fromParent, toParent) =>
          this.s.nfs.rename(fromParent, fromName, toParent, toName, {
            signal: o.signal,
            path: `${this.where(fs)} -> ${this.where(ts)}`,
          }),
      }),
    );
  }

  /** The target of a copy or unpack, made here (MKDIR: never into something): its handle. */
  private async makeTarget(root: Buffer, to: string[], fsid: string, o: OpOptions): Promise<Buffer> {
    const { parent, name } = lastOf(to);
    const dir = parent.length ? (await this.mkdirs(root, parent, null, { ...o, fsid })).handle : root;
    let made;
    try {
      made = await this.s.nfs.mkdir(dir, name, { mode: 0o700 }, { signal: o.signal, path: this.where(to) });
    } catch (e) {
      if (isNfsStatus(e, NFS3ERR.EXIST)) throw new AlreadyExists(`${this.describe(to)} already exists`);
      throw e;
    }
    return made.handle ?? (await this.s.nfs.lookup(dir, name, { signal: o.signal })).handle;
  }

  /** The tree at the permit's path copied to its target. */
  async copyTree(permit: Permit, o: CopyTreeOptions = {}): Promise<CopyStats> {
    const { segs, to, fsid } = admitted(permit, 'copy');
    return this.withRoot(o, async (root) => {
      const src = await this.walk(root, segs, o);
      const attrs = copyAttrs(await this.attrsOf(src, o));
      const handle = await this.makeTarget(root, to, fsid, o);
      const where = (p: string) => this.where(p ? [...to, ...p.split('/')] : to);
      const copy = new TreeCopy(
        nfs3Source(this.s.nfs, (p) => this.where(p ? [...segs, p] : segs)),
        nfs3Sink(this.s.nfs, where),
        {
          ...o,
          fsid,
          slots: slotsFor(this.server),
          describe: (p) => `${this.server}:${this.where(p ? [...segs, p] : segs)}`,
        },
      );
      return copy.run(src.handle, attrs, handle, '');
    });
  }

  /** The archive file at the permit's path unpacked into its target. */
  async unpackArchive(permit: Permit, o: CopyTreeOptions = {}): Promise<CopyStats> {
    const { segs, to, fsid } = admitted(permit, 'unpack');
    return this.withRoot(o, async (root) => {
      const src = await this.walk(root, segs, o);
      const a = await this.attrsOf(src, o);
      if (a.type !== 'file' || String(a.fsid) !== fsid) {
        throw new FailedPrecondition(`${this.describe(segs)} is not an archive file on the share's file system`);
      }
      const handle = await this.makeTarget(root, to, fsid, o);
      const where = (p: string) => this.where(p ? [...to, ...p.split('/')] : to);
      const read = (offset: number, count: number) =>
        this.s.nfs.read(src.handle, offset, count, { signal: o.signal, path: this.where(segs) });
      return unpackTar(read, nfs3UnpackSink(this.s.nfs, where), handle, {
        ...o,
        slots: slotsFor(this.server),
        archive: this.describe(segs),
      });
    });
  }

  async statfs(o: OpOptions = {}): Promise<FsStat> {
    return this.withRoot(o, (root) => this.s.nfs.fsstat(root, { signal: o.signal, path: this.share }));
  }
}

export interface Nfs3StoresOptions {
  timeoutMs: number;
  nfsPort?: number | undefined;
  mountPort?: number | undefined;
  privilegedPort?: boolean | undefined;
  log?: Logger | undefined;
  /** A server's session unused this long is closed (connections and root handles); default 5 min. */
  idleMs?: number | undefined;
}

/**
 * NfsStores over real NFS servers: one session (connections, root handles) per server in use.
 * A session idle for `idleMs` is closed, so a server named once (a stale or mistyped handle)
 * holds no connection and no health entry for ever.
 */
export function createNfs3Stores(opts: Nfs3StoresOptions): NfsStores {
  const sessions = new Map<string, NfsSession>();
  const session = (server: string) => {
    let s = sessions.get(server);
    if (!s) {
      const so: SessionOptions = { ...opts, server };
      s = new NfsSession(so);
      sessions.set(server, s);
    }
    return s;
  };
  const idleMs = opts.idleMs ?? 5 * 60_000;
  const sweep = () => {
    const now = Date.now();
    for (const [server, s] of sessions) {
      if (s.busy === 0 && now - s.lastUsed >= idleMs) {
        s.close();
        sessions.delete(server);
        opts.log?.debug({ server }, 'closed idle NFS session');
      }
    }
  };
  const sweeper = setInterval(sweep, Math.max(10, Math.min(idleMs / 2, 30_000)));
  sweeper.unref();
  return {
    open: (server, share) => {
      const s = session(server);
      s.lastUsed = Date.now();
      return gated(new Nfs3Store(s, server, share));
    },
    ping: async (signal) => {
      await Promise.all([...sessions.values()].map((s) => s.nfs.null({ signal })));
    },
    health: async (signal) =>
      Promise.all(
        [...sessions.entries()].map(async ([server, s]) => {
          // A health check is not use: it must not keep an idle session open.
          const lastUsed = s.lastUsed;
          try {
            return await nullHealth(server, () => s.nfs.null({ signal }));
          } finally {
            s.lastUsed = lastUsed;
          }
        }),
      ),
    servers: () => [...sessions.keys()],
    close: async () => {
      clearInterval(sweeper);
      for (const s of sessions.values()) s.close();
      sessions.clear();
    },
  };
}
