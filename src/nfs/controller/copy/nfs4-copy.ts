// The copy engine's source and sink (copy-tree.ts) over NFSv4.0, 4.1 and 4.2: READDIR with every
// attribute a copy keeps (handles included) for the listing, READ/READLINK with the anonymous
// stateid for the source, and for the copy guarded OPEN (a file, in its minor version's terms:
// nfs4-open.ts) or CREATE (anything else), LINK, unstable WRITE on the open stateid with COMMIT,
// CLOSE, and SETATTR with client times. Owners are the server's strings, set back as they were
// read, so a server that maps names copies names.
// Over NFSv4.2 the server may copy a file's bytes itself (nfs4ServerCopy): CLONE first (shared
// blocks on a reflink file system: instant, no space used), then COPY, then the bytes through here.
import type { Logger } from 'pino';
import { Internal, Unavailable } from '../../../errors.js';
import type { Attrs4, Nfs4Client } from '../../client/nfs4.js';
import { NFS4ERR, isJunction, isNfs4Status, op } from '../../client/nfs4.js';
import { ANONYMOUS, COPY_ATTRS, type Copied, type Stateid, io } from '../../client/nfs4-io.js';
import type { Opener } from '../../client/nfs4-open.js';
import type { CopyAttrs, CopySink, CopySource, ServerCopy, SourceEntry } from './copy-tree.js';
import type { UnpackSink } from './tar-unpack.js';
import type { OpOptions } from '../store/store.js';

/** Where the copy is, for messages: `where(path)` is the server path. */
type Where = (path: string) => string;

const idOf = (s: string | undefined): number => (s !== undefined && /^\d+$/.test(s) ? Number(s) : -1);

/** A copy's attributes from NFSv4's; a junction (an export or mount begins) reads as another file system. */
export function copyAttrs4(a: Attrs4, where: string): CopyAttrs {
  const need = <T>(v: T | undefined, what: string): T => {
    if (v === undefined) throw new Internal(`${where}: the NFS server did not return the ${what} a copy keeps`);
    return v;
  };
  const fsid = need(a.fsid, 'fsid');
  return {
    type: need(a.type, 'type'),
    mode: need(a.mode, 'mode'),
    uid: idOf(a.owner),
    gid: idOf(a.group),
    owner: need(a.owner, 'owner'),
    group: need(a.group, 'owner group'),
    size: a.size ?? 0,
    nlink: a.numlinks ?? 1,
    fileid: String(need(a.fileid, 'fileid')),
    fsid: isJunction(a) ? `junction ${fsid}` : fsid,
    atime: need(a.atime, 'access time'),
    mtime: need(a.mtime, 'modify time'),
    rdev: a.rawdev ?? { major: 0, minor: 0 },
  };
}

export function nfs4Source(c: Nfs4Client, where: Where): CopySource<Buffer> {
  return {
    async entries(dir, path, o) {
      const out: SourceEntry<Buffer>[] = [];
      let cookie = 0n;
      let verf: Buffer = Buffer.alloc(8);
      for (let restarts = 0; ;) {
        let page;
        try {
          [, page] = (await c.compound([op.putfh(dir), io.readdir(cookie, verf)], where(path), o.signal)) as [
            unknown,
            ReturnType<ReturnType<typeof io.readdir>['read']>,
          ];
        } catch (e) {
          if (restarts++ > 0 || !isNfs4Status(e, NFS4ERR.BAD_COOKIE)) throw e;
          [out.length, cookie, verf] = [0, 0n, Buffer.alloc(8)];
          continue;
        }
        for (const e of page.entries) {
          const at = where(path ? `${path}/${e.name}` : e.name);
          let { attrs } = e;
          if (!attrs.filehandle) {
            const r = await c.compound([op.putfh(dir), op.lookup(e.name), op.getattr(COPY_ATTRS)], at, o.signal);
            attrs = r[2] as Attrs4;
          }
          const handle = attrs.filehandle;
          if (!handle) throw new Internal(`${at}: the NFS server gave no file handle`);
          out.push({ name: e.name, handle, attrs: copyAttrs4(attrs, at) });
        }
        const last = page.entries.at(-1);
        if (page.eof || !last) return out;
        cookie = last.cookie;
        verf = page.cookieverf;
      }
    },
    async read(file, offset, count, path, o) {
      const r = await c.compound([op.putfh(file), io.read(offset, count)], where(path), o.signal);
      return r[1] as { eof: boolean; data: Buffer };
    },
    async readlink(link, path, o) {
      return (await c.compound([op.putfh(link), io.readlink()], where(path), o.signal))[1] as string;
    },
  };
}

/** A handle of the copy; a file being written also holds its open stateid. */
export interface Made4 {
  fh: Buffer;
  stateid?: Stateid;
}

/** A private mode while the copy is made: nobody but root reads a half-written file. */
const PRIVATE = { mode: 0o600 };

export function nfs4Sink(c: Nfs4Client, opener: Opener, where: Where): CopySink<Made4> {
  const run = (ops: Parameters<Nfs4Client['compound']>[0], path: string, o: OpOptions) =>
    c.compound(ops, where(path), o.signal);
  const made = async (
    dir: Made4,
    create: Parameters<Nfs4Client['compound']>[0][number],
    path: string,
    o: OpOptions,
  ) => {
    const r = await run([op.putfh(dir.fh), create, op.getfh()], path, o);
    return { fh: r[2] as Buffer };
  };
  return {
    mkdir: (dir, name, path, o) => made(dir, op.mkdir(name, { mode: 0o700 }), path, o),
    createFile: (dir, name, path, o) => opener.create(dir.fh, name, PRIVATE, where(path), o.signal),
    async write(file, offset, data, path, o) {
      if (!file.stateid) throw new Internal(`${where(path)}: write to a file that is not open`);
      let verf: Buffer = Buffer.alloc(8);
      for (let done = 0; done < data.length;) {
        // A short write (a server with a smaller maxwrite) leaves the rest for another call.
        const r = await run([op.putfh(file.fh), io.write(file.stateid, offset + done, data.subarray(done))], path, o);
        const w = r[1] as { count: number; verf: Buffer };
        if (w.count === 0) throw new Error(`${where(path)}: the NFS server wrote nothing`);
        done += w.count;
        verf = w.verf;
      }
      return verf;
    },
    commit: async (file, path, o) => (await run([op.putfh(file.fh), io.commit()], path, o))[1] as Buffer,
    async release(file, path) {
      if (!file.stateid) return;
      const stateid = file.stateid;
      delete file.stateid;
      // A failed CLOSE leaves state the server drops with this client's lease; the copy's own
      // error is what matters.
      await opener.close(file.fh, stateid, where(path)).catch(() => undefined);
    },
    symlink: (dir, name, target, path, o) => made(dir, io.make('symlink', name, {}, { target }), path, o),
    mknod: (dir, name, a, path, o) => made(dir, io.make(a.type, name, PRIVATE, { rdev: a.rdev }), path, o),
    async link(file, dir, name, path, o) {
      await run([op.putfh(file.fh), op.savefh(), op.putfh(dir.fh), io.link(name)], path, o);
    },
    async setattrs(h, a, path, o) {
      const owner = a.owner ?? String(a.uid);
      const group = a.group ?? String(a.gid);
      const mode = a.type === 'symlink' ? undefined : a.mode;
      // Two SETATTRs in one COMPOUND: the chown first, as it may clear setuid/setgid.
      await run(
        [
          op.putfh(h.fh),
          op.setattr({ owner, group }),
          op.setattr({ ...(mode !== undefined && { mode }), atime: a.atime, mtime: a.mtime }),
        ],
        path,
        o,
      );
    },
  };
}

/** The sink with LOOKUP, for an unpack's hard links. */
export function nfs4UnpackSink(c: Nfs4Client, opener: Opener, where: Where): UnpackSink<Made4> {
  return {
    ...nfs4Sink(c, opener, where),
    async lookup(dir, name, path, o) {
      try {
        const r = await c.compound(
          [op.putfh(dir.fh), op.lookup(name), op.getfh(), op.getattr(COPY_ATTRS)],
          where(path),
          o.signal,
        );
        return { handle: { fh: r[2] as Buffer }, type: (r[3] as Attrs4).type ?? 'file' };
      } catch (e) {
        if (isNfs4Status(e, NFS4ERR.NOENT)) return null;
        throw e;
      }
    },
  };
}

/**
 * What a server showed it cannot do, for the life of its client: CLONE per file system (a
 * server may export a reflink file system next to one without), COPY for the whole server.
 */
interface Refused {
  clone: Set<string>;
  copy: boolean;
}
const refusedBy = new WeakMap<object, Refused>();

/** What a server-side copy needs of the client. */
export type Compounder = Pick<Nfs4Client, 'compound' | 'minorVersion'>;

/** The answers that mean "this server or file system does not do that", not "this call failed". */
const NOT_HERE = [NFS4ERR.NOTSUPP, NFS4ERR.OP_ILLEGAL, NFS4ERR.XDEV] as const;

/**
 * Server-side copy over NFSv4.2, or undefined on an older session. Both take the source through
 * the anonymous stateid (as READ does: the source is never opened) and the destination through
 * its open stateid. CLONE's durability is checked like a WRITE's: a COMMIT in the same COMPOUND
 * before it gives the verifier that the file's final COMMIT must repeat. COPY is synchronous
 * (a server may copy less than asked per call: Linux nfsd caps one at 4 MiB), each reply with
 * its write verifier; a server that answers asynchronously anyway (a callback this client has
 * no channel for) has its copy cancelled and is not asked again.
 */
export function nfs4ServerCopy(c: Compounder, where: Where, log?: Logger): ServerCopy<Buffer, Made4> | undefined {
  if (c.minorVersion !== 2) return undefined;
  let refused = refusedBy.get(c);
  if (!refused) refusedBy.set(c, (refused = { clone: new Set(), copy: false }));
  const r = refused;
  const pair = (from: Buffer, to: Buffer) => [op.putfh(from), op.savefh(), op.putfh(to)];
  return {
    async copy(from, to, path, o) {
      const dst = to.stateid;
      if (!dst) throw new Internal(`${where(path)}: server-side copy into a file that is not open`);
      const fsid = from.attrs.fsid;
      if (!r.clone.has(fsid)) {
        try {
          const res = await c.compound(
            [...pair(from.handle, to.fh), io.commit(), io.clone(ANONYMOUS, dst, 0, 0, 0)],
            where(path),
            o.signal,
          );
          return { how: 'clone', verfs: [res[3] as Buffer], bytes: from.attrs.size };
        } catch (e) {
          if (isNfs4Status(e, ...NOT_HERE)) {
            r.clone.add(fsid);
            log?.info({ fsid, err: (e as Error).message }, 'NFS server does not CLONE on this file system; using COPY');
          } else if (!isNfs4Status(e, NFS4ERR.INVAL)) throw e; // INVAL: not this file (alignment, a special inode)
        }
      }
      if (r.copy) return null;
      const verfs: Buffer[] = [];
      let off = 0;
      for (const size = from.attrs.size; off < size;) {
        let done: Copied;
        try {
          const res = await c.compound(
            [...pair(from.handle, to.fh), io.copy(ANONYMOUS, dst, off, off, size - off)],
            where(path),
            o.signal,
          );
          done = res[3] as Copied;
        } catch (e) {
          if (off === 0 && isNfs4Status(e, ...NOT_HERE, NFS4ERR.OFFLOAD_NO_REQS)) {
            r.copy = true;
            log?.info({ err: (e as Error).message }, 'NFS server does not COPY; the controller copies the bytes');
            return null;
          }
          throw e;
        }
        if (done.callback) {
          r.copy = true;
          await c
            .compound([op.putfh(to.fh), io.offloadCancel(done.callback)], where(path), undefined)
            .catch(() => undefined);
          throw new Unavailable(
            `${where(path)}: the NFS server copied asynchronously although asked not to; the copy is retried without server-side COPY`,
          );
        }
        verfs.push(done.verf);
        if (done.count === 0) break; // the source shrank while being copied
        off += done.count;
      }
      return { how: 'copy', verfs, bytes: off };
    },
  };
}
