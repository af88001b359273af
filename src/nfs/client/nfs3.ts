// The NFSv3 procedures (RFC 1813) the controller needs, encoded and decoded over an RPC transport.
// Failure bodies (wcc data) are not decoded: the status is all the callers act on.
import type { RpcCall } from './rpc.js';
import { NFS3_OK, NfsStatusError } from './status.js';
import { XdrReader, XdrWriter } from './xdr.js';

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
}

/** Attributes to set; absent fields are left unchanged. */
export interface Sattr {
  mode?: number | undefined;
  uid?: number | undefined;
  gid?: number | undefined;
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
  MKDIR: 9,
  REMOVE: 12,
  RMDIR: 13,
  RENAME: 14,
  READDIRPLUS: 17,
  FSSTAT: 18,
} as const;

function fattr(r: XdrReader): Fattr {
  const t = r.u32();
  const mode = r.u32() & 0o7777;
  const nlink = r.u32();
  const uid = r.u32();
  const gid = r.u32();
  const size = r.u64n();
  const used = r.u64n();
  r.u32(); // rdev
  r.u32();
  const fsid = r.u64();
  const fileid = r.u64();
  r.u32(); // atime
  r.u32();
  const mtimeMs = r.u32() * 1000 + Math.floor(r.u32() / 1e6);
  const ctimeMs = r.u32() * 1000 + Math.floor(r.u32() / 1e6);
  return { type: TYPES[t - 1] ?? 'file', mode, nlink, uid, gid, size, used, fileid, fsid, mtimeMs, ctimeMs };
}

function postOpAttr(r: XdrReader): Fattr | undefined {
  return r.bool() ? fattr(r) : undefined;
}

function postOpFh(r: XdrReader): Buffer | undefined {
  return r.bool() ? r.opaque(64) : undefined;
}

function sattr(w: XdrWriter, s: Sattr): XdrWriter {
  for (const v of [s.mode, s.uid, s.gid]) {
    if (v === undefined) w.bool(false);
    else w.bool(true).u32(v);
  }
  return w.bool(false).u32(0).u32(0); // size unchanged, atime and mtime DONT_CHANGE
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
