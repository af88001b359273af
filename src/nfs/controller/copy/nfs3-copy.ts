// The copy engine's source and sink (copy-tree.ts) over the NFSv3 client: READDIRPLUS for the
// listing with full attributes, READ/READLINK for the source, and for the copy guarded CREATE,
// MKDIR, SYMLINK, MKNOD, LINK, unstable WRITE with COMMIT, and SETATTR with client times.
import type { Fattr, Nfs3Client } from '../../client/nfs3.js';
import { isNfsStatus, NFS3ERR } from '../../client/status.js';
import type { CopyAttrs, CopySink, CopySource, SourceEntry } from './copy-tree.js';
import type { UnpackSink } from './tar-unpack.js';
import type { OpOptions } from '../store/store.js';

export const copyAttrs = (a: Fattr): CopyAttrs => ({
  type: a.type,
  mode: a.mode,
  uid: a.uid,
  gid: a.gid,
  size: a.size,
  nlink: a.nlink,
  fileid: String(a.fileid),
  fsid: String(a.fsid),
  atime: a.atime,
  mtime: a.mtime,
  rdev: a.rdev,
});

/** Where the copy is, for the client's messages: `where(path)` is the server path. */
type Where = (path: string) => string;

export function nfs3Source(nfs: Nfs3Client, where: Where): CopySource<Buffer> {
  return {
    async entries(dir, path, o) {
      const out: SourceEntry<Buffer>[] = [];
      let cookie = 0n;
      let verf: Buffer = Buffer.alloc(8);
      for (let restarts = 0; ;) {
        let page;
        try {
          page = await nfs.readdirplus(dir, cookie, verf, { signal: o.signal, path: where(path) });
        } catch (e) {
          if (restarts++ > 0 || !isNfsStatus(e, NFS3ERR.BAD_COOKIE)) throw e;
          [out.length, cookie, verf] = [0, 0n, Buffer.alloc(8)];
          continue;
        }
        for (const e of page.entries) {
          if (e.name === '.' || e.name === '..') continue;
          let { handle, attrs } = e;
          if (!handle || !attrs) {
            const r = await nfs.lookup(dir, e.name, { signal: o.signal, path: where(`${path}/${e.name}`) });
            handle = r.handle;
            attrs = r.attrs ?? (await nfs.getattr(r.handle, { signal: o.signal }));
          }
          out.push({ name: e.name, handle, attrs: copyAttrs(attrs) });
        }
        const last = page.entries.at(-1);
        if (page.eof || !last) return out;
        cookie = last.cookie;
        verf = page.cookieverf;
      }
    },
    read: (file, offset, count, path, o) => nfs.read(file, offset, count, { signal: o.signal, path: where(path) }),
    readlink: (link, path, o) => nfs.readlink(link, { signal: o.signal, path: where(path) }),
  };
}

/** A private mode while the copy is made: nobody but root reads a half-written file. */
const PRIVATE = { mode: 0o600 };

export function nfs3Sink(nfs: Nfs3Client, where: Where): CopySink<Buffer> {
  const opts = (path: string, o: OpOptions) => ({ signal: o.signal, path: where(path) });
  const handleOf = async (dir: Buffer, name: string, r: { handle: Buffer | undefined }, path: string, o: OpOptions) =>
    r.handle ?? (await nfs.lookup(dir, name, opts(path, o))).handle;
  return {
    mkdir: async (dir, name, path, o) =>
      handleOf(dir, name, await nfs.mkdir(dir, name, { mode: 0o700 }, opts(path, o)), path, o),
    createFile: async (dir, name, path, o) =>
      handleOf(dir, name, await nfs.create(dir, name, PRIVATE, opts(path, o)), path, o),
    async write(file, offset, data, path, o) {
      let verf: Buffer = Buffer.alloc(8);
      for (let done = 0; done < data.length;) {
        // A short write (a server with a smaller wtmax) leaves the rest for another call.
        const r = await nfs.write(file, offset + done, data.subarray(done), 'unstable', opts(path, o));
        if (r.count === 0) throw new Error(`${where(path)}: the NFS server wrote nothing`);
        done += r.count;
        verf = r.verf;
      }
      return verf;
    },
    commit: (file, path, o) => nfs.commit(file, opts(path, o)),
    symlink: async (dir, name, target, path, o) =>
      handleOf(dir, name, await nfs.symlink(dir, name, target, {}, opts(path, o)), path, o),
    mknod: async (dir, name, a, path, o) => {
      const type = a.type as 'block' | 'char' | 'socket' | 'fifo';
      return handleOf(
        dir,
        name,
        await nfs.mknod(dir, name, type, { ...PRIVATE, rdev: a.rdev }, opts(path, o)),
        path,
        o,
      );
    },
    link: (file, dir, name, path, o) => nfs.link(file, dir, name, opts(path, o)),
    async setattrs(h, a, path, o) {
      await nfs.setattr(h, { uid: a.uid, gid: a.gid }, opts(path, o));
      const mode = a.type === 'symlink' ? undefined : a.mode;
      await nfs.setattr(h, { mode, atime: a.atime, mtime: a.mtime }, opts(path, o));
    },
  };
}

/** The sink with LOOKUP, for an unpack's hard links. */
export function nfs3UnpackSink(nfs: Nfs3Client, where: Where): UnpackSink<Buffer> {
  return {
    ...nfs3Sink(nfs, where),
    async lookup(dir, name, path, o) {
      try {
        const r = await nfs.lookup(dir, name, { signal: o.signal, path: where(path) });
        const attrs = r.attrs ?? (await nfs.getattr(r.handle, { signal: o.signal }));
        return { handle: r.handle, type: attrs.type };
      } catch (e) {
        if (isNfsStatus(e, NFS3ERR.NOENT)) return null;
        throw e;
      }
    },
  };
}
