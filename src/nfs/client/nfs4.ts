// NFSv4 (RFC 7530 for 4.0, RFC 8881/5661 for 4.1, RFC 7862 for 4.2) COMPOUNDs for the directory
// operations the controller needs, on port 2049 with no portmapper and no MOUNT. 4.1 needs a
// session (EXCHANGE_ID, CREATE_SESSION, then SEQUENCE first in every COMPOUND); 4.0 needs client
// state (SETCLIENTID) only for OPEN/LOCK, which directory operations never use, so 4.0 COMPOUNDs
// go out as they are. 4.2 is 4.1 with more operations (server-side COPY and CLONE, which the
// tree copy uses) and the same session. A server answers a minor version it lacks with
// NFS4ERR_MINOR_VERS_MISMATCH: the client tries 4.2, then 4.1, then 4.0.
import crypto from 'node:crypto';
import os from 'node:os';
import type { Logger } from 'pino';
import { CsiError, type ErrorKind, FailedPrecondition } from '../../errors.js';
import { defined } from '../../defined.js';
import type { FileType, FsStat, NfsTime } from './nfs3.js';
import { byStatus, NFS_ERROR_HINTS, NFS_ERROR_KINDS } from './status.js';
import type { RpcCall } from './rpc.js';
import { XdrReader, XdrWriter } from './xdr.js';

export const NFS4_PROGRAM = 100003;
export const NFS_V4 = 4;

export const OP = {
  ACCESS: 3,
  CLOSE: 4,
  COMMIT: 5,
  CREATE: 6,
  DELEGRETURN: 8,
  GETATTR: 9,
  GETFH: 10,
  LINK: 11,
  LOOKUP: 15,
  OPEN: 18,
  OPEN_CONFIRM: 20,
  PUTFH: 22,
  PUTROOTFH: 24,
  READ: 25,
  READDIR: 26,
  READLINK: 27,
  REMOVE: 28,
  RENAME: 29,
  SAVEFH: 32,
  SETATTR: 34,
  SETCLIENTID: 35,
  SETCLIENTID_CONFIRM: 36,
  WRITE: 38,
  EXCHANGE_ID: 42,
  CREATE_SESSION: 43,
  SEQUENCE: 53,
  RECLAIM_COMPLETE: 58,
  COPY: 60,
  OFFLOAD_CANCEL: 66,
  CLONE: 71,
} as const;

export const NFS4ERR = {
  PERM: 1,
  NOENT: 2,
  IO: 5,
  ACCESS: 13,
  EXIST: 17,
  XDEV: 18,
  NOTDIR: 20,
  ISDIR: 21,
  INVAL: 22,
  NOSPC: 28,
  ROFS: 30,
  NAMETOOLONG: 63,
  NOTEMPTY: 66,
  DQUOT: 69,
  STALE: 70,
  BADHANDLE: 10001,
  BAD_COOKIE: 10003,
  NOTSUPP: 10004,
  SERVERFAULT: 10006,
  DELAY: 10008,
  EXPIRED: 10011,
  GRACE: 10013,
  FHEXPIRED: 10014,
  WRONGSEC: 10016,
  MINOR_VERS_MISMATCH: 10021,
  STALE_CLIENTID: 10022,
  BAD_SEQID: 10026,
  BADOWNER: 10039,
  OP_ILLEGAL: 10044,
  BADSESSION: 10052,
  BADSLOT: 10053,
  COMPLETE_ALREADY: 10054,
  SYMLINK: 10029,
  SEQ_MISORDERED: 10063,
  DEADSESSION: 10078,
  OFFLOAD_NO_REQS: 10094,
} as const;
/** The operation number a reply carries for an operation the server does not know. */
const OP_ILLEGAL_CODE = 10044;
const NAMES = new Map<number, string>(Object.entries(NFS4ERR).map(([k, v]) => [v, `NFS4ERR_${k}`]));

/** The shared NFSv3/v4 tables (status.ts) and the rows of NFSv4's own codes. */
const KINDS = new Map([
  ...NFS_ERROR_KINDS,
  ...byStatus<ErrorKind>([
    ['FailedPrecondition', [NFS4ERR.BADOWNER, NFS4ERR.WRONGSEC, NFS4ERR.SYMLINK]],
    [
      'Unavailable',
      [
        NFS4ERR.FHEXPIRED,
        NFS4ERR.GRACE,
        NFS4ERR.BADSESSION,
        NFS4ERR.DEADSESSION,
        NFS4ERR.EXPIRED,
        NFS4ERR.STALE_CLIENTID,
      ],
    ],
  ]),
]);
const HINTS = new Map([
  ...NFS_ERROR_HINTS,
  ...byStatus([
    [' (the export does not allow sec=sys)', [NFS4ERR.WRONGSEC]],
    [' (the server is in its grace period after a restart; retry shortly)', [NFS4ERR.GRACE]],
    [
      ' (a component of the path is a symbolic link; the driver never follows links: name the real directory in share and subDir)',
      [NFS4ERR.SYMLINK],
    ],
  ]),
]);

/** One operation of a COMPOUND failed; `status` keeps the raw nfsstat4. */

/**
 * SEQUENCE (RFC 8881 §18.46), the first op of every NFSv4.1 compound: session id, the slot's
 * sequence id, the slot, the highest slot we use, not cachethis. The reply's fields (session id,
 * sequence id, slot, highest and target highest slot, status flags) are read past: nothing here
 * resizes its slot table from them.
 */
function sequenceOp(s: Session, seq: number, slot: number): Op4 {
  return {
    code: OP.SEQUENCE,
    name: 'SEQUENCE',
    args: (w) =>
      w
        .fixed(s.id)
        .u32(seq)
        .u32(slot)
        .u32(s.slots.length - 1)
        .bool(false),
    read: (r) => {
      r.fixed(16);
      r.u32();
      r.u32();
      r.u32();
      r.u32();
      r.u32();
    },
  };
}

export class Nfs4StatusError extends CsiError {
  constructor(
    readonly status: number,
    readonly op: string,
    what: string,
    extra = '',
  ) {
    super(
      KINDS.get(status) ?? 'Internal',
      `NFSv4 ${op} ${what}: ${NAMES.get(status) ?? `status ${status}`}${extra || (HINTS.get(status) ?? '')}`,
    );
  }
}

export const isNfs4Status = (e: unknown, ...s: number[]): e is Nfs4StatusError =>
  e instanceof Nfs4StatusError && s.includes(e.status);

// Attribute numbers (RFC 7530 §5).
export const A = {
  TYPE: 1,
  SIZE: 4,
  FSID: 8,
  FILEHANDLE: 19,
  FILEID: 20,
  FILES_AVAIL: 21,
  FILES_FREE: 22,
  FILES_TOTAL: 23,
  MODE: 33,
  NUMLINKS: 35,
  OWNER: 36,
  OWNER_GROUP: 37,
  RAWDEV: 41,
  SPACE_AVAIL: 42,
  SPACE_FREE: 43,
  SPACE_TOTAL: 44,
  TIME_ACCESS: 47,
  TIME_ACCESS_SET: 48,
  TIME_METADATA: 52,
  TIME_MODIFY: 53,
  TIME_MODIFY_SET: 54,
  MOUNTED_ON_FILEID: 55,
} as const;
const TYPES: Record<number, FileType> = {
  1: 'file',
  2: 'dir',
  3: 'block',
  4: 'char',
  5: 'symlink',
  6: 'socket',
  7: 'fifo',
};
export const FSSTAT_ATTRS: readonly number[] = [
  A.FILES_AVAIL,
  A.FILES_FREE,
  A.FILES_TOTAL,
  A.SPACE_AVAIL,
  A.SPACE_FREE,
  A.SPACE_TOTAL,
];
/** The FSSTAT attributes are the uint64 counters the decoder keeps in `u64`. */
const U64_ATTRS = new Set<number>(FSSTAT_ATTRS);

export function bitmap(w: XdrWriter, attrs: readonly number[]): void {
  const words: number[] = [];
  for (const a of attrs) {
    const i = a >> 5;
    while (words.length <= i) words.push(0);
    words[i] = ((words[i] ?? 0) | (1 << (a & 31))) >>> 0;
  }
  w.u32(words.length);
  for (const x of words) w.u32(x);
}

export function readBitmap(r: XdrReader): number[] {
  const n = r.u32();
  if (n > 8) throw new FailedPrecondition(`NFSv4 reply has a bitmap of ${n} words`);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const word = r.u32();
    for (let b = 0; b < 32; b++) if (word & (1 << b)) out.push(i * 32 + b);
  }
  return out;
}

/** Decoded attributes; owner strings as the server sent them. */
export interface Attrs4 {
  type?: FileType;
  mode?: number;
  owner?: string;
  group?: string;
  size?: number;
  mtimeMs?: number;
  ctimeMs?: number;
  /** The file system (major:minor) the object is on; it changes where an export or mount begins. */
  fsid?: string;
  fileid?: bigint;
  /** At the root of a file system: the fileid of the directory it is mounted on; else fileid. */
  mountedOnFileid?: bigint;
  /** What a tree copy reads besides the above: exact times, link count, device numbers, handle. */
  atime?: NfsTime;
  mtime?: NfsTime;
  numlinks?: number;
  rawdev?: { major: number; minor: number };
  filehandle?: Buffer;
  u64: Map<number, number>;
}

/** nfstime4: signed 64-bit seconds and nanoseconds. */
const readTime = (r: XdrReader): NfsTime => ({ sec: Number(BigInt.asIntN(64, r.u64())), nsec: r.u32() });
export const writeTime = (w: XdrWriter, t: NfsTime) => w.u64(BigInt.asUintN(64, BigInt(t.sec))).u32(t.nsec);

export function readFattr(r: XdrReader): Attrs4 {
  const bits = readBitmap(r);
  const vals = new XdrReader(r.opaque());
  const out: Attrs4 = { u64: new Map() };
  for (const b of bits) {
    if (b === A.TYPE) out.type = TYPES[vals.u32()] ?? 'file';
    else if (b === A.MODE) out.mode = vals.u32() & 0o7777;
    else if (b === A.OWNER) out.owner = vals.string(1024);
    else if (b === A.OWNER_GROUP) out.group = vals.string(1024);
    else if (b === A.SIZE) out.size = vals.u64n();
    else if (b === A.FSID) out.fsid = `${vals.u64()}:${vals.u64()}`;
    else if (b === A.FILEID) out.fileid = vals.u64();
    else if (b === A.MOUNTED_ON_FILEID) out.mountedOnFileid = vals.u64();
    else if (b === A.FILEHANDLE) out.filehandle = vals.opaque(128);
    else if (b === A.NUMLINKS) out.numlinks = vals.u32();
    else if (b === A.RAWDEV) out.rawdev = { major: vals.u32(), minor: vals.u32() };
    else if (b === A.TIME_ACCESS) out.atime = readTime(vals);
    else if (b === A.TIME_METADATA) out.ctimeMs = vals.u64n() * 1000 + Math.floor(vals.u32() / 1e6);
    else if (b === A.TIME_MODIFY) {
      out.mtime = readTime(vals);
      out.mtimeMs = out.mtime.sec * 1000 + Math.floor(out.mtime.nsec / 1e6);
    } else if (U64_ATTRS.has(b)) out.u64.set(b, vals.u64n());
    else break; // not asked for: its size is unknown, and nothing after it is needed
  }
  return out;
}

export interface SetAttrs4 {
  mode?: number;
  owner?: string;
  group?: string;
  /** Set to these client times (SET_TO_CLIENT_TIME4). */
  atime?: NfsTime;
  mtime?: NfsTime;
}

export function writeFattr(w: XdrWriter, s: SetAttrs4): void {
  const bits: number[] = [];
  const vals = new XdrWriter();
  if (s.mode !== undefined) {
    bits.push(A.MODE);
    vals.u32(s.mode);
  }
  if (s.owner !== undefined) {
    bits.push(A.OWNER);
    vals.string(s.owner);
  }
  if (s.group !== undefined) {
    bits.push(A.OWNER_GROUP);
    vals.string(s.group);
  }
  // Ascending attribute numbers: the values follow the bitmap's order.
  if (s.atime !== undefined) {
    bits.push(A.TIME_ACCESS_SET);
    writeTime(vals.u32(1), s.atime);
  }
  if (s.mtime !== undefined) {
    bits.push(A.TIME_MODIFY_SET);
    writeTime(vals.u32(1), s.mtime);
  }
  bitmap(w, bits);
  w.opaque(vals.bytes());
}

export const skipChangeInfo = (r: XdrReader) => {
  r.bool();
  r.u64();
  r.u64();
};

/** One operation of a COMPOUND: its arguments and, when it has a body, how to read it. */
export interface Op4<T = unknown> {
  code: number;
  name: string;
  args?: (w: XdrWriter) => void;
  read?: (r: XdrReader) => T;
}

/** ACCESS4 bits (RFC 7530 §16.1): what changing a directory's entries needs. */
export const ACCESS4 = { LOOKUP: 0x02, MODIFY: 0x04, EXTEND: 0x08, DELETE: 0x10 } as const;

export const op = {
  /** What the server would let this client do to the current object: [supported, granted]. */
  access: (bits: number): Op4<{ supported: number; granted: number }> => ({
    code: OP.ACCESS,
    name: 'ACCESS',
    args: (w) => w.u32(bits),
    read: (r) => ({ supported: r.u32(), granted: r.u32() }),
  }),
  putrootfh: (): Op4 => ({ code: OP.PUTROOTFH, name: 'PUTROOTFH' }),
  putfh: (fh: Buffer): Op4 => ({ code: OP.PUTFH, name: 'PUTFH', args: (w) => w.opaque(fh) }),
  getfh: (): Op4<Buffer> => ({ code: OP.GETFH, name: 'GETFH', read: (r) => r.opaque(128) }),
  savefh: (): Op4 => ({ code: OP.SAVEFH, name: 'SAVEFH' }),
  lookup: (name: string): Op4 => ({ code: OP.LOOKUP, name: 'LOOKUP', args: (w) => w.string(name) }),
  getattr: (attrs: readonly number[] = STAT_ATTRS): Op4<Attrs4> => ({
    code: OP.GETATTR,
    name: 'GETATTR',
    args: (w) => bitmap(w, attrs),
    read: readFattr,
  }),
  mkdir: (name: string, s: SetAttrs4): Op4 => ({
    code: OP.CREATE,
    name: 'CREATE',
    args: (w) => {
      w.u32(2 /* NF4DIR */).string(name);
      writeFattr(w, s);
    },
    read: (r) => {
      skipChangeInfo(r);
      readBitmap(r);
    },
  }),
  setattr: (s: SetAttrs4): Op4 => ({
    code: OP.SETATTR,
    name: 'SETATTR',
    // the anonymous stateid: no OPEN is involved in changing a directory's attributes
    args: (w) => {
      w.u32(0).fixed(Buffer.alloc(12));
      writeFattr(w, s);
    },
  }),
  remove: (name: string): Op4 => ({
    code: OP.REMOVE,
    name: 'REMOVE',
    args: (w) => w.string(name),
    read: skipChangeInfo,
  }),
  rename: (from: string, to: string): Op4 => ({
    code: OP.RENAME,
    name: 'RENAME',
    args: (w) => w.string(from).string(to),
    read: (r) => {
      skipChangeInfo(r);
      skipChangeInfo(r);
    },
  }),
  readdir: (cookie: bigint, verf: Buffer): Op4<ReaddirPage> => ({
    code: OP.READDIR,
    name: 'READDIR',
    args: (w) => {
      w.u64(cookie).fixed(verf).u32(16384).u32(65536);
      bitmap(w, [...BOUNDARY_ATTRS]);
    },
    read: (r) => {
      const cookieverf = r.fixed(8);
      const entries: ReaddirEntry[] = [];
      while (r.bool()) {
        const cookie = r.u64();
        const name = r.string();
        const a = readFattr(r);
        entries.push({ cookie, name, type: a.type, fsid: a.fsid, junction: isJunction(a) });
      }
      return { cookieverf, entries, eof: r.bool() };
    },
  }),
};

/** type: undefined when the server did not return the TYPE attribute asked for. */
export interface ReaddirEntry {
  cookie: bigint;
  name: string;
  type: FileType | undefined;
  /** undefined when the server did not return it. */
  fsid: string | undefined;
  /** A file system or export begins here (mounted_on_fileid != fileid); false when not said. */
  junction: boolean;
}
export interface ReaddirPage {
  cookieverf: Buffer;
  entries: ReaddirEntry[];
  eof: boolean;
}

/** What tells where a file system or export begins: type, fsid, fileid, mounted_on_fileid. */
export const BOUNDARY_ATTRS: readonly number[] = [A.TYPE, A.FSID, A.FILEID, A.MOUNTED_ON_FILEID];

/** The root of a file system mounted or exported here: mounted_on_fileid differs from fileid. */
export function isJunction(a: Attrs4): boolean {
  return a.mountedOnFileid !== undefined && a.fileid !== undefined && a.mountedOnFileid !== a.fileid;
}

export const STAT_ATTRS: readonly number[] = [
  A.TYPE,
  A.SIZE,
  A.FSID,
  A.MODE,
  A.OWNER,
  A.OWNER_GROUP,
  A.TIME_METADATA,
  A.TIME_MODIFY,
];

export function fsStatOf(a: Attrs4): FsStat {
  const g = (k: number) => a.u64.get(k) ?? 0;
  return {
    totalBytes: g(A.SPACE_TOTAL),
    freeBytes: g(A.SPACE_FREE),
    availBytes: g(A.SPACE_AVAIL),
    totalFiles: g(A.FILES_TOTAL),
    freeFiles: g(A.FILES_FREE),
    availFiles: g(A.FILES_AVAIL),
  };
}

/** What carries a COMPOUND: an RPC connection to program 100003 version 4. */
export interface Rpc4 {
  call(c: RpcCall): Promise<XdrReader>;
}

export type MinorVersion = 0 | 1 | 2;

interface Session {
  id: Buffer;
  /** EXCHANGE_ID's client id: what an open-owner names (OPEN). */
  clientid: bigint;
  slots: number[];
  free: number[];
  waiters: Array<() => void>;
}

const SESSION_LOST = [
  NFS4ERR.BADSESSION,
  NFS4ERR.DEADSESSION,
  NFS4ERR.STALE_CLIENTID,
  NFS4ERR.EXPIRED,
  NFS4ERR.SEQ_MISORDERED,
  NFS4ERR.BADSLOT,
];

export interface Nfs4ClientOptions {
  server: string;
  /** 4.2, then 4.1, then 4.0 (default), or exactly one minor version. */
  minor?: MinorVersion | undefined;
  log?: Logger | undefined;
}

/** The minor versions tried in turn: the one asked for, or the newest first. */
const minorsOf = (asked: MinorVersion | undefined): MinorVersion[] => (asked === undefined ? [2, 1, 0] : [asked]);

export class Nfs4Client {
  private minor: MinorVersion | undefined;
  private session: Promise<Session> | undefined;
  // One client owner per process: a restart is a new client, which is all directory work needs.
  private readonly owner = Buffer.from(
    `pve-nfs-csi/${os.hostname()}/${process.pid}/${crypto.randomBytes(4).toString('hex')}`,
  );
  private readonly verifier = crypto.randomBytes(8);

  constructor(
    private readonly rpc: Rpc4,
    private readonly o: Nfs4ClientOptions,
  ) {
    this.minor = o.minor === 0 ? 0 : undefined;
  }

  /** The session's minor version while it is being negotiated (1 or 2). */
  private trying: 1 | 2 = 2;

  /** The minor version in use once known (after the first call). */
  get minorVersion(): MinorVersion | undefined {
    return this.minor;
  }

  /**
   * The open-owner an OPEN names (RFC 8881 §18.16: this session's client id and an owner
   * string), or null on NFSv4.0, whose OPEN needs client state of its own (nfs4-open.ts).
   */
  async openOwner(signal?: AbortSignal): Promise<{ clientid: bigint; owner: Buffer } | null> {
    if (this.minor === undefined) await this.negotiate(signal);
    if (this.minor === 0) return null;
    return { clientid: (await this.openSession(signal)).clientid, owner: this.owner };
  }

  null(signal?: AbortSignal): Promise<void> {
    return this.rpc.call({ prog: NFS4_PROGRAM, vers: NFS_V4, proc: 0, name: 'NULL', signal }).then(() => undefined);
  }

  /**
   * Runs the operations as one COMPOUND; resolves with each operation's body (undefined for none).
   * NFS4ERR_DELAY and NFS4ERR_GRACE (Linux nfsd refuses REMOVE and RENAME in its grace period
   * after a restart) are waited out for up to `graceWaitMs`, then reported as UNAVAILABLE.
   */
  async compound(ops: Op4[], what: string, signal?: AbortSignal, graceWaitMs = 15_000): Promise<unknown[]> {
    const until = Date.now() + graceWaitMs;
    for (let delay = 250; ; delay = Math.min(delay * 2, 2000)) {
      try {
        return await this.compoundOnce(ops, what, signal);
      } catch (e) {
        if (!isNfs4Status(e, NFS4ERR.DELAY, NFS4ERR.GRACE) || Date.now() + delay > until || signal?.aborted) throw e;
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  private async compoundOnce(ops: Op4[], what: string, signal?: AbortSignal): Promise<unknown[]> {
    if (this.minor === undefined) await this.negotiate(signal);
    const minor = defined(this.minor, 'the negotiated NFSv4 minor version');
    if (minor === 0) return this.send(0, ops, what, signal);
    for (let attempt = 1; ; attempt++) {
      const s = await this.openSession(signal);
      const slot = await this.acquire(s);
      const seq = defined(s.slots[slot], `sequence id of slot ${slot}`) + 1;
      const sequence = sequenceOp(s, seq, slot);
      // An object: the callback sets it, which a `let` would hide from TypeScript's narrowing.
      const reply = { landed: false };
      try {
        const res = await this.send(minor, [sequence, ...ops], what, signal, () => {
          reply.landed = true;
        });
        return res.slice(1);
      } catch (e) {
        if (
          e instanceof Nfs4StatusError &&
          e.op === 'SEQUENCE' &&
          SESSION_LOST.includes(e.status as never) &&
          attempt < 3
        ) {
          // The lease ran out while idle, or the server restarted: a new session, same COMPOUND.
          this.o.log?.debug({ server: this.o.server, err: e.message }, 'NFSv4.1 session lost; creating a new one');
          this.dropSession(s);
          continue;
        }
        throw e;
      } finally {
        // A slot whose reply never came is in an unknown state: the session goes with it.
        if (reply.landed) s.slots[slot] = seq;
        else this.dropSession(s);
        this.release(s, slot);
      }
    }
  }

  private dropSession(s: Session): void {
    void this.session?.then(
      (cur) => {
        if (cur === s) this.session = undefined;
      },
      () => undefined,
    );
  }

  private acquire(s: Session): Promise<number> {
    const slot = s.free.pop();
    if (slot !== undefined) return Promise.resolve(slot);
    // release() pushes the slot back before it wakes one waiter.
    return new Promise((resolve) => s.waiters.push(() => resolve(defined(s.free.pop(), 'a released slot'))));
  }

  private release(s: Session, slot: number): void {
    s.free.push(slot);
    s.waiters.shift()?.();
  }

  private async negotiate(signal?: AbortSignal): Promise<void> {
    const minors = minorsOf(this.o.minor);
    for (const [i, minor] of minors.entries()) {
      if (minor === 0) {
        this.o.log?.info({ server: this.o.server }, 'NFS server has no NFSv4.1; using NFSv4.0');
        this.minor = 0;
        return;
      }
      this.trying = minor;
      try {
        await this.openSession(signal);
        this.minor = minor;
        return;
      } catch (e) {
        const last = i === minors.length - 1;
        if (last || !isNfs4Status(e, NFS4ERR.MINOR_VERS_MISMATCH, NFS4ERR.NOTSUPP, NFS4ERR.OP_ILLEGAL)) throw e;
        this.session = undefined;
        if (minor === 2) this.o.log?.debug({ server: this.o.server }, 'NFS server has no NFSv4.2; trying NFSv4.1');
      }
    }
  }

  private openSession(signal?: AbortSignal): Promise<Session> {
    if (!this.session) {
      const p = this.createSession(signal);
      this.session = p;
      p.catch(() => {
        if (this.session === p) this.session = undefined;
      });
    }
    return this.session;
  }

  private async createSession(signal?: AbortSignal): Promise<Session> {
    // A lost session is re-created in the version negotiated; the first one in the one being tried.
    const minor = this.minor === 1 || this.minor === 2 ? this.minor : this.trying;
    const exchange: Op4<{ clientid: bigint; seq: number }> = {
      code: OP.EXCHANGE_ID,
      name: 'EXCHANGE_ID',
      args: (w) => {
        w.fixed(this.verifier).opaque(this.owner);
        w.u32(0x00010000); // EXCHGID4_FLAG_USE_NON_PNFS
        w.u32(0); // SP4_NONE
        w.u32(0); // no client implementation id
      },
      read: (r) => {
        const clientid = r.u64();
        const seq = r.u32();
        r.u32(); // flags
        if (r.u32() !== 0)
          throw new FailedPrecondition(
            `NFS server ${this.o.server} insists on state protection; only SP4_NONE is supported`,
          );
        r.u64();
        r.opaque();
        r.opaque(); // server owner, scope
        const impl = r.u32();
        for (let i = 0; i < impl; i++) {
          r.string();
          r.string();
          r.u64();
          r.u32();
        }
        return { clientid, seq };
      },
    };
    const [ex] = (await this.send(minor, [exchange], 'to establish a client', signal)) as [
      { clientid: bigint; seq: number },
    ];
    const channel = (w: XdrWriter, maxReq: number, maxResp: number, ops: number, reqs: number) =>
      w.u32(0).u32(maxReq).u32(maxResp).u32(0).u32(ops).u32(reqs).u32(0);
    const readChannel = (r: XdrReader) => {
      r.u32();
      r.u32();
      r.u32();
      r.u32();
      r.u32();
      const reqs = r.u32();
      const ird = r.u32();
      for (let i = 0; i < ird; i++) r.u32();
      return reqs;
    };
    const create: Op4<{ id: Buffer; slots: number }> = {
      code: OP.CREATE_SESSION,
      name: 'CREATE_SESSION',
      args: (w) => {
        w.u64(ex.clientid).u32(ex.seq).u32(0);
        channel(w, 1 << 20, 1 << 20, 16, 16);
        channel(w, 16384, 16384, 2, 1);
        w.u32(0x40000000); // callback program: never used, no delegations are asked for
        w.u32(1).u32(0); // one callback security flavour: AUTH_NONE
      },
      read: (r) => {
        const id = r.fixed(16);
        r.u32();
        r.u32();
        const slots = readChannel(r);
        readChannel(r);
        return { id, slots };
      },
    };
    const [cs] = (await this.send(minor, [create], 'to create a session', signal)) as [{ id: Buffer; slots: number }];
    const n = Math.max(1, Math.min(cs.slots, 16));
    const s: Session = {
      id: cs.id,
      clientid: ex.clientid,
      slots: new Array<number>(n).fill(0),
      free: [...Array(n).keys()].reverse(),
      waiters: [],
    };
    // Tells the server this client reclaims nothing, so it never holds our operations for a grace period.
    const reclaim = sequenceOp(s, 1, 0);
    try {
      await this.send(
        minor,
        [reclaim, { code: OP.RECLAIM_COMPLETE, name: 'RECLAIM_COMPLETE', args: (w) => w.bool(false) }],
        'after creating a session',
        signal,
      );
    } catch (e) {
      if (!isNfs4Status(e, NFS4ERR.COMPLETE_ALREADY)) throw e;
    }
    s.slots[0] = 1;
    return s;
  }

  private async send(
    minor: MinorVersion,
    ops: Op4[],
    what: string,
    signal?: AbortSignal,
    onReply?: () => void,
  ): Promise<unknown[]> {
    const w = new XdrWriter().string('').u32(minor).u32(ops.length);
    for (const o of ops) {
      w.u32(o.code);
      o.args?.(w);
    }
    const r = await this.rpc.call({
      prog: NFS4_PROGRAM,
      vers: NFS_V4,
      proc: 1,
      name: `COMPOUND(${ops.map((o) => o.name).join(',')})`,
      args: w.bytes(),
      signal,
    });
    onReply?.();
    const status = r.u32();
    r.string();
    const n = r.u32();
    if (status === NFS4ERR.MINOR_VERS_MISMATCH && n === 0)
      throw new Nfs4StatusError(status, 'COMPOUND', `(minor version ${minor}) ${what}`);
    const out: unknown[] = [];
    for (let i = 0; i < n; i++) {
      const o = ops[i];
      const code = r.u32();
      // An operation the server does not know comes back as OP_ILLEGAL (RFC 8881 §15.2): a status, not a garbled reply.
      if (o && code === OP_ILLEGAL_CODE && r.u32() === NFS4ERR.OP_ILLEGAL)
        throw new Nfs4StatusError(NFS4ERR.OP_ILLEGAL, o.name, what);
      if (!o || code !== o.code)
        throw new FailedPrecondition(
          `NFS server ${this.o.server} answered operation ${code} where ${o?.name ?? 'nothing'} was sent`,
        );
      const st = r.u32();
      if (code === OP.SETATTR) readBitmap(r); // attrsset comes with every SETATTR result
      if (st !== 0) throw new Nfs4StatusError(st, o.name, what, st === NFS4ERR.BADOWNER ? BADOWNER_HINT : '');
      out.push(o.read ? o.read(r) : undefined);
    }
    if (status !== 0) throw new Nfs4StatusError(status, 'COMPOUND', what);
    return out;
  }
}

const BADOWNER_HINT =
  ' (the server does not accept numeric owner strings such as "1000": enable them on the server ' +
  '(Linux knfsd: nfsd module parameter nfs4_disable_idmapping=Y, the default for sec=sys; ' +
  'nfs-ganesha: NFSV4 { Allow_Numeric_Owners = true; }; TrueNAS/Synology: turn off NFSv4 ID mapping or ' +
  '"map users to nobody" for this share), or leave uid/gid out of the StorageClass, ' +
  'or use NFSv3 (mountOptions: [nfsvers=3]))';
