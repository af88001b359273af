// The NFSv3 procedures (RFC 1813) the controller needs, encoded and decoded over an RPC transport.
// Failure bodies (wcc data) are not decoded: the status is all the callers act on.
import type { RpcCall } from './rpc.js';
import { NFS3_OK, NfsStatusError } from './status.js';
import { XdrError, XdrReader, XdrWriter } from './xdr.js';

export const NFS_PROGRAM = 100003;
export const NFS_V3 = 3;

export interface RpcTransport {
  call(c: RpcCall): Promise<XdrReader>;
}

export type FileType = 'file' | 'dir' | 'block' | 'char' | 'symlink' | 'socket' | 'fifo';
const TYPES: FileType[] = ['file', 'dir', 'block', 'char', 'symlink', 'socket', 'fifo'];

export interface Fattr {
  type: FileType;
  /** Permission bits including setuid/setgid/sticky (mode & 0o7777). */
  mode: number;
  nlink: number;
  uid: number;
  gid: number;
  size: number;
  used: number;
  fileid: bigint;
  /** The file system the object is on (a change between a directory and its entry is a boundary). */
  fsid: bigint;
  mtimeMs: number;
  /** Status change (a rename or chmod of the entry itself sets it). */
  ctimeMs: number;
  /** Exact times, for copies that keep them (nfstime3: seconds and nanoseconds). */
  atime: NfsTime;
  mtime: NfsTime;
  /** Device numbers of a block or character special file. */
  rdev: { major: number; minor: number };
}

export interface NfsTime {
  sec: number;
  nsec: number;
}

/** Attributes to set; absent fields are left unchanged. Times are set to the given value. */
export interface Sattr {
  mode?: number | undefined;
  uid?: number | undefined;
  gid?: number | undefined;
  size?: number | undefined;
  /** MKNOD of a device only. */
  rdev?: { major: number; minor: number } | undefined;
  atime?: NfsTime | undefined;
  mtime?: NfsTime | undefined;
}

/** stable_how of WRITE (RFC 1813 3.3.7). */
export type StableHow = 'unstable' | 'data-sync' | 'file-sync';
const STABLE: StableHow[] = ['unstable', 'data-sync', 'file-sync'];

export interface WriteResult {
  count: number;
  committed: StableHow;
  /** The server's write verifier: a change between WRITE and COMMIT means it restarted. */
  verf: Buffer;
}

export interface DirEntry {
  name: string;
  fileid: bigint;
  cookie: bigint;
  // post_op_attr / post_op_fh3: the server may leave either out; the decoder always sets the key.
  attrs: Fattr | undefined;
  handle: Buffer | undefined;
}

export interface ReaddirPage {
  entries: DirEntry[];
  cookieverf: Buffer;
  eof: boolean;
}

export interface FsStat {
  totalBytes: number;
  freeBytes: number;
  availBytes: number;
  totalFiles: number;
  freeFiles: number;
  availFiles: number;
}

export interface CallOpts {
  signal?: AbortSignal | undefined;
  /** Server path the call is about, for error messages. */
  path?: string | undefined;
}

const PROC = {
  NULL: 0,
  GETATTR: 1,
  SETATTR: 2,
  LOOKUP: 3,
  READLINK: 5,
  READ: 6,
  WRITE: 7,
  CREATE: 8,
  MKDIR: 9,
  SYMLINK: 10,
  MKNOD: 11,
  REMOVE: 12,
  RMDIR: 13,
  RENAME: 14,
  LINK: 15,
  READDIRPLUS: 17,
  FSSTAT: 18,
  COMMIT: 21,
} as const;

function fattr(r: XdrReader): Fattr {
  const t = r.u32();
  const mode = r.u32() & 0o7777;
  const nlink = r.u32();
  const uid = r.u32();
  const gid = r.u32();
  const size = r.u64n();
  const used = r.u64n();
  const rdev = { major: r.u32(), minor: r.u32() };
  const fsid = r.u64();
  const fileid = r.u64();
  const atime = nfstime(r);
  const mtime = nfstime(r);
  const ctime = nfstime(r);
  const ms = (x: NfsTime) => x.sec * 1000 + Math.floor(x.nsec / 1e6);
  return {
    type: TYPES[t - 1] ?? 'file',
    mode,
    nlink,
    uid,
    gid,
    size,
    used,
    fileid,
    fsid,
    mtimeMs: ms(mtime),
    ctimeMs: ms(ctime),
    atime,
    mtime,
    rdev,
  };
}

function nfstime(r: XdrReader): NfsTime {
  return { sec: r.u32(), nsec: r.u32() };
}

/** wcc_data: the attributes before (size, mtime, ctime) and after; callers need neither. */
function skipWcc(r: XdrReader): void {
  if (r.bool()) r.fixed(24);
  postOpAttr(r);
}

function postOpAttr(r: XdrReader): Fattr | undefined {
  return r.bool() ? fattr(r) : undefined;
}

export type SpecialType = 'block' | 'char' | 'socket' | 'fifo';

export interface Created {
  handle: Buffer | undefined;
  attrs: Fattr | undefined;
}

/** CREATE/SYMLINK/MKNOD result: post_op_fh3, post_op_attr, wcc_data of the directory. */
function created(r: XdrReader): Created {
  const handle = postOpFh(r);
  const attrs = postOpAttr(r);
  skipWcc(r);
  return { handle, attrs };
}

function postOpFh(r: XdrReader): Buffer | undefined {
  return r.bool() ? r.opaque(64) : undefined;
}

/** time_how: DONT_CHANGE (0) or SET_TO_CLIENT_TIME (2) with the value. */
function setTime(w: XdrWriter, t: NfsTime | undefined): void {
  if (t === undefined) w.u32(0);
  else w.u32(2).u32(t.sec).u32(t.nsec);
}

export function sattr(w: XdrWriter, s: Sattr): XdrWriter {
  for (const v of [s.mode, s.uid, s.gid]) {
    if (v === undefined) w.bool(false);
    else w.bool(true).u32(v);
  }
  if (s.size === undefined) w.bool(false);
  else w.bool(true).u64(s.size);
  setTime(w, s.atime);
  setTime(w, s.mtime);
  return w;
}

export class Nfs3Client {
  constructor(
    private readonly rpc: RpcTransport,
    /** e.g. "127.0.0.1", for messages. */
    private readonly server: string,
  ) {}

  private async call(proc: keyof typeof PROC, args: XdrWriter | null, o: CallOpts, what: string): Promise<XdrReader> {
    const r = await this.rpc.call({
      prog: NFS_PROGRAM,
      vers: NFS_V3,
      proc: PROC[proc],
      name: proc,
      args: args?.bytes(),
      signal: o.signal,
    });
    if (proc === 'NULL') return r;
    const status = r.u32();
    if (status !== NFS3_OK) throw new NfsStatusError(status, proc, `${this.server}:${o.path ?? what}`);
    return r;
  }

  async null(o: CallOpts = {}): Promise<void> {
    await this.call('NULL', null, o, '');
  }

  async getattr(fh: Buffer, o: CallOpts = {}): Promise<Fattr> {
    const r = await this.call('GETATTR', new XdrWriter().opaque(fh), o, '(handle)');
    return fattr(r);
  }

  async setattr(fh: Buffer, s: Sattr, o: CallOpts = {}): Promise<void> {
    const w = sattr(new XdrWriter().opaque(fh), s).bool(false); // no ctime guard
    await this.call('SETATTR', w, o, '(handle)');
  }

  async lookup(dir: Buffer, name: string, o: CallOpts = {}): Promise<{ handle: Buffer; attrs: Fattr | undefined }> {
    const r = await this.call('LOOKUP', new XdrWriter().opaque(dir).string(name), o, name);
    const handle = r.opaque(64);
    return { handle, attrs: postOpAttr(r) };
  }

  async mkdir(
    dir: Buffer,
    name: string,
    s: Sattr,
    o: CallOpts = {},
  ): Promise<{ handle: Buffer | undefined; attrs: Fattr | undefined }> {
    const r = await this.call('MKDIR', sattr(new XdrWriter().opaque(dir).string(name), s), o, name);
    const handle = postOpFh(r);
    return { handle, attrs: postOpAttr(r) };
  }

  async remove(dir: Buffer, name: string, o: CallOpts = {}): Promise<void> {
    await this.call('REMOVE', new XdrWriter().opaque(dir).string(name), o, name);
  }

  async rmdir(dir: Buffer, name: string, o: CallOpts = {}): Promise<void> {
    await this.call('RMDIR', new XdrWriter().opaque(dir).string(name), o, name);
  }

  async rename(fromDir: Buffer, fromName: string, toDir: Buffer, toName: string, o: CallOpts = {}): Promise<void> {
    const w = new XdrWriter().opaque(fromDir).string(fromName).opaque(toDir).string(toName);
    await this.call('RENAME', w, o, `${fromName} -> ${toName}`);
  }

  /** READ: up to `count` bytes at `offset`; `eof` when the file ends within them. */
  async read(fh: Buffer, offset: number, count: number, o: CallOpts = {}): Promise<{ data: Buffer; eof: boolean }> {
    const r = await this.call('READ', new XdrWriter().opaque(fh).u64(offset).u32(count), o, '(file)');
    postOpAttr(r);
    const n = r.u32();
    const eof = r.bool();
    const data = r.opaque(count);
    if (data.length !== n) throw new XdrError(`malformed READ reply: count ${n}, data ${data.length} bytes`);
    return { data, eof };
  }

  async write(fh: Buffer, offset: number, data: Buffer, stable: StableHow, o: CallOpts = {}): Promise<WriteResult> {
    const w = new XdrWriter().opaque(fh).u64(offset).u32(data.length).u32(STABLE.indexOf(stable)).opaque(data);
    const r = await this.call('WRITE', w, o, '(file)');
    skipWcc(r);
    const count = r.u32();
    const committed = STABLE[r.u32()];
    if (committed === undefined) throw new XdrError('malformed WRITE reply: unknown stable_how');
    return { count, committed, verf: r.fixed(8) };
  }

  /** COMMIT of everything written unstably; the verifier to compare with WRITE's. */
  async commit(fh: Buffer, o: CallOpts = {}): Promise<Buffer> {
    const r = await this.call('COMMIT', new XdrWriter().opaque(fh).u64(0).u32(0), o, '(file)');
    skipWcc(r);
    return r.fixed(8);
  }

  /** CREATE, GUARDED: EXIST when the name is taken, so nothing is ever truncated by a retry. */
  async create(dir: Buffer, name: string, s: Sattr, o: CallOpts = {}): Promise<Created> {
    const r = await this.call('CREATE', sattr(new XdrWriter().opaque(dir).string(name).u32(1), s), o, name);
    return created(r);
  }

  async symlink(dir: Buffer, name: string, target: string, s: Sattr, o: CallOpts = {}): Promise<Created> {
    const w = sattr(new XdrWriter().opaque(dir).string(name), s).string(target);
    return created(await this.call('SYMLINK', w, o, name));
  }

  /** MKNOD of a FIFO, socket or device special file. */
  async mknod(dir: Buffer, name: string, type: SpecialType, s: Sattr, o: CallOpts = {}): Promise<Created> {
    const w = new XdrWriter()
      .opaque(dir)
      .string(name)
      .u32(TYPES.indexOf(type) + 1);
    sattr(w, s);
    if (type === 'block' || type === 'char') w.u32(s.rdev?.major ?? 0).u32(s.rdev?.minor ?? 0);
    return created(await this.call('MKNOD', w, o, name));
  }

  async readlink(fh: Buffer, o: CallOpts = {}): Promise<string> {
    const r = await this.call('READLINK', new XdrWriter().opaque(fh), o, '(symlink)');
    postOpAttr(r);
    return r.string(4096);
  }

  /** LINK: a new name `name` in `dir` for the file `fh`. */
  async link(fh: Buffer, dir: Buffer, name: string, o: CallOpts = {}): Promise<void> {
    const r = await this.call('LINK', new XdrWriter().opaque(fh).opaque(dir).string(name), o, name);
    postOpAttr(r);
    skipWcc(r);
  }

  async readdirplus(dir: Buffer, cookie: bigint, cookieverf: Buffer, o: CallOpts = {}): Promise<ReaddirPage> {
    const w = new XdrWriter()
      .opaque(dir)
      .u64(cookie)
      .fixed(cookieverf)
      .u32(32 * 1024)
      .u32(64 * 1024);
    const r = await this.call('READDIRPLUS', w, o, '(directory)');
    postOpAttr(r);
    const verf = r.fixed(8);
    const entries: DirEntry[] = [];
    while (r.bool()) {
      const fileid = r.u64();
      const name = r.string(4096);
      const next = r.u64();
      const attrs = postOpAttr(r);
      const handle = postOpFh(r);
      entries.push({ name, fileid, cookie: next, attrs, handle });
    }
    return { entries, cookieverf: verf, eof: r.bool() };
  }

  async fsstat(fh: Buffer, o: CallOpts = {}): Promise<FsStat> {
    const r = await this.call('FSSTAT', new XdrWriter().opaque(fh), o, '(share)');
    postOpAttr(r);
    return {
      totalBytes: r.u64n(),
      freeBytes: r.u64n(),
      availBytes: r.u64n(),
      totalFiles: r.u64n(),
      freeFiles: r.u64n(),
      availFiles: r.u64n(),
    };
  }
}
