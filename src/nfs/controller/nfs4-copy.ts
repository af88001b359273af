// The copy engine's source and sink (copy-tree.ts) over NFSv4.1: READDIR with every attribute a
// copy keeps (handles included) for the listing, READ/READLINK with the anonymous stateid for
// the source, and for the copy guarded OPEN (a file) or CREATE (anything else), LINK, unstable
// WRITE on the open stateid with COMMIT, CLOSE, and SETATTR with client times. Owners are the
// server's strings, set back as they were read, so a server that maps names copies names.
import { Internal } from '../../errors.js';
import type { Attrs4, Nfs4Client } from '../client/nfs4.js';
import { NFS4ERR, isJunction, isNfs4Status, op } from '../client/nfs4.js';
import { COPY_ATTRS, type OpenOwner, type Stateid, io } from '../client/nfs4-io.js';
import type { CopyAttrs, CopySink, CopySource, SourceEntry } from './copy-tree.js';
import type { UnpackSink } from './tar-unpack.js';
import type { OpOptions } from './store.js';

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

export function nfs4Sink(c: Nfs4Client, owner: OpenOwner, where: Where): CopySink<Made4> {
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
    async createFile(dir, name, path, o) {
      const r = await run([op.putfh(dir.fh), io.create(owner, name, PRIVATE), op.getfh()], path, o);
      const opened = r[1] as { stateid: Stateid; delegation: Stateid | undefined };
      const fh = r[2] as Buffer;
      if (opened.delegation) await run([op.putfh(fh), io.delegreturn(opened.delegation)], path, {});
      return { fh, stateid: opened.stateid };
    },
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
      // Without a signal: a cancelled copy still closes what it opened. A failed CLOSE leaves
      // state the server drops with this client's lease; the copy's own error is what matters.
      await run([op.putfh(file.fh), io.close(stateid)], path, {}).catch(() => undefined);
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
export function nfs4UnpackSink(c: Nfs4Client, owner: OpenOwner, where: Where): UnpackSink<Made4> {
  return {
    ...nfs4Sink(c, owner, where),
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
