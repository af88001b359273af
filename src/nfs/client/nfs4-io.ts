// The NFSv4.1 operations a tree copy needs beyond directory work (nfs4.ts): OPEN to create a
// file (NFSv4.0's too: SETCLIENTID, its seqids, OPEN_CONFIRM), WRITE/COMMIT/CLOSE on its open stateid, READ and READLINK with the anonymous stateid,
// CREATE of symlinks and special files, LINK, and READDIR with the attributes of every entry;
// and NFSv4.2's server-side CLONE and COPY (RFC 7862 §15.13, §15.2), with OFFLOAD_CANCEL for a
// COPY the server ran asynchronously although a synchronous one was asked for.
import type { FileType } from './nfs3.js';
import {
  A,
  type Attrs4,
  OP,
  type Op4,
  type SetAttrs4,
  bitmap,
  readBitmap,
  readFattr,
  skipChangeInfo,
  writeFattr,
} from './nfs4.js';
import type { XdrReader, XdrWriter } from './xdr.js';

/** stateid4: seqid and 12 opaque bytes, kept as the 16 bytes they are on the wire. */
export type Stateid = Buffer;
/** The anonymous stateid (all zeros): I/O outside any OPEN, which READ of a file we never open uses. */
export const ANONYMOUS: Stateid = Buffer.alloc(16);

/** Everything a copy keeps, in one READDIR or GETATTR. */
export const COPY_ATTRS: readonly number[] = [
  A.TYPE,
  A.SIZE,
  A.FSID,
  A.FILEHANDLE,
  A.FILEID,
  A.MODE,
  A.NUMLINKS,
  A.OWNER,
  A.OWNER_GROUP,
  A.RAWDEV,
  A.TIME_ACCESS,
  A.TIME_MODIFY,
  A.MOUNTED_ON_FILEID,
];

export interface OpenOwner {
  clientid: bigint;
  owner: Buffer;
}

export interface Opened {
  stateid: Stateid;
  /** NFSv4.0: a new open-owner's OPEN must be confirmed (OPEN_CONFIRM) before its stateid is usable. */
  confirm: boolean;
  /** A delegation the server granted anyway; returned at once (nothing here can answer a recall). */
  delegation: Stateid | undefined;
}

/** NFSv4.0's per-owner sequencing (RFC 7530 §9.1.7); NFSv4.1 sends 0 and orders by session slot. */
export interface Seq40 {
  seqid: number;
}

const OPEN4_SHARE_ACCESS_WRITE = 2;
/** RFC 8881 §18.16.3: a 4.1 client that wants no delegation says so. */
const OPEN4_SHARE_ACCESS_WANT_NO_DELEG = 0x0400;
const OPEN4_RESULT_CONFIRM = 2;
const OPEN4_CREATE = 1;
const GUARDED4 = 1;
const CLAIM_NULL = 0;

function skipAce(r: XdrReader): void {
  r.u32();
  r.u32();
  r.u32();
  r.string();
}

/** open_delegation4 (RFC 8881 §18.16.2); the stateid of a READ or WRITE delegation. */
function readDelegation(r: XdrReader): Stateid | undefined {
  const kind = r.u32();
  if (kind === 0) return undefined; // OPEN_DELEGATE_NONE
  if (kind === 3) {
    // OPEN_DELEGATE_NONE_EXT: why not, and for contention/resource whether it will signal later
    const why = r.u32();
    if (why === 1 || why === 2) r.bool();
    return undefined;
  }
  const sid = r.fixed(16);
  r.bool(); // recall
  if (kind === 2) {
    // nfs_space_limit4
    if (r.u32() === 1) r.u64();
    else {
      r.u32();
      r.u32();
    }
  }
  skipAce(r);
  return sid;
}

const typeCode: Partial<Record<FileType, number>> = { block: 3, char: 4, symlink: 5, socket: 6, fifo: 7 };

export interface ReaddirAttrsEntry {
  cookie: bigint;
  name: string;
  attrs: Attrs4;
}

export const io = {
  /**
   * OPEN of a new file for writing (GUARDED: NFS4ERR_EXIST when the name is taken); then GETFH.
   * With `v40` it is NFSv4.0's: the owner's sequence id, and no delegation wish (4.1's bits are
   * invalid there).
   */
  create: (owner: OpenOwner, name: string, attrs: SetAttrs4, v40?: Seq40): Op4<Opened> => ({
    code: OP.OPEN,
    name: 'OPEN',
    args: (w) => {
      w.u32(v40?.seqid ?? 0);
      w.u32(v40 ? OPEN4_SHARE_ACCESS_WRITE : OPEN4_SHARE_ACCESS_WRITE | OPEN4_SHARE_ACCESS_WANT_NO_DELEG).u32(0);
      w.u64(owner.clientid).opaque(owner.owner);
      w.u32(OPEN4_CREATE).u32(GUARDED4);
      writeFattr(w, attrs);
      w.u32(CLAIM_NULL).string(name);
    },
    read: (r) => {
      const stateid = r.fixed(16);
      skipChangeInfo(r);
      const rflags = r.u32();
      readBitmap(r);
      return { stateid, confirm: (rflags & OPEN4_RESULT_CONFIRM) !== 0, delegation: readDelegation(r) };
    },
  }),
  /** NFSv4.0 OPEN_CONFIRM (RFC 7530 §16.18): the confirmed open stateid. */
  openConfirm: (stateid: Stateid, v40: Seq40): Op4<Stateid> => ({
    code: OP.OPEN_CONFIRM,
    name: 'OPEN_CONFIRM',
    args: (w) => w.fixed(stateid).u32(v40.seqid),
    read: (r) => r.fixed(16),
  }),
  close: (stateid: Stateid, v40?: Seq40): Op4 => ({
    code: OP.CLOSE,
    name: 'CLOSE',
    args: (w) => w.u32(v40?.seqid ?? 0).fixed(stateid),
    read: (r) => r.fixed(16),
  }),
  /**
   * NFSv4.0 SETCLIENTID (RFC 7530 §16.33): this client's id and boot verifier, and a callback
   * address no server can reach (so it grants no delegation: nothing here answers a recall).
   */
  setClientId: (verifier: Buffer, id: Buffer): Op4<{ clientid: bigint; confirm: Buffer }> => ({
    code: OP.SETCLIENTID,
    name: 'SETCLIENTID',
    args: (w) => {
      w.fixed(verifier).opaque(id);
      w.u32(0x40000000).string('tcp').string('0.0.0.0.0.0'); // cb_program, cb_location
      w.u32(0); // callback_ident
    },
    read: (r) => ({ clientid: r.u64(), confirm: r.fixed(8) }),
  }),
  setClientIdConfirm: (clientid: bigint, confirm: Buffer): Op4 => ({
    code: OP.SETCLIENTID_CONFIRM,
    name: 'SETCLIENTID_CONFIRM',
    args: (w) => w.u64(clientid).fixed(confirm),
  }),
  delegreturn: (stateid: Stateid): Op4 => ({
    code: OP.DELEGRETURN,
    name: 'DELEGRETURN',
    args: (w) => w.fixed(stateid),
  }),
  write: (stateid: Stateid, offset: number, data: Buffer): Op4<{ count: number; verf: Buffer }> => ({
    code: OP.WRITE,
    name: 'WRITE',
    args: (w) => w.fixed(stateid).u64(offset).u32(0 /* UNSTABLE4 */).opaque(data),
    read: (r) => {
      const count = r.u32();
      r.u32(); // committed
      return { count, verf: r.fixed(8) };
    },
  }),
  /** COMMIT of the whole file (offset 0, count 0): its write verifier. */
  commit: (): Op4<Buffer> => ({
    code: OP.COMMIT,
    name: 'COMMIT',
    args: (w) => w.u64(0).u32(0),
    read: (r) => r.fixed(8),
  }),
  read: (offset: number, count: number): Op4<{ eof: boolean; data: Buffer }> => ({
    code: OP.READ,
    name: 'READ',
    args: (w) => w.fixed(ANONYMOUS).u64(offset).u32(count),
    read: (r) => ({ eof: r.bool(), data: r.opaque() }),
  }),
  readlink: (): Op4<string> => ({ code: OP.READLINK, name: 'READLINK', read: (r) => r.string(4096) }),
  /** CREATE of a symlink, device, socket or FIFO (files are OPENed, directories are nfs4.ts's mkdir). */
  make: (
    type: FileType,
    name: string,
    attrs: SetAttrs4,
    extra: { target?: string; rdev?: { major: number; minor: number } },
  ): Op4 => ({
    code: OP.CREATE,
    name: 'CREATE',
    args: (w: XdrWriter) => {
      const code = typeCode[type];
      if (code === undefined) throw new Error(`CREATE cannot make a ${type}`);
      w.u32(code);
      if (type === 'symlink') w.string(extra.target ?? '');
      if (type === 'block' || type === 'char') w.u32(extra.rdev?.major ?? 0).u32(extra.rdev?.minor ?? 0);
      w.string(name);
      writeFattr(w, attrs);
    },
    read: (r) => {
      skipChangeInfo(r);
      readBitmap(r);
    },
  }),
  /** LINK: the saved handle (the file) gets the name `name` in the current one (a directory). */
  link: (name: string): Op4 => ({ code: OP.LINK, name: 'LINK', args: (w) => w.string(name), read: skipChangeInfo }),
  readdir: (cookie: bigint, verf: Buffer, attrs: readonly number[] = COPY_ATTRS) => ({
    code: OP.READDIR,
    name: 'READDIR',
    args: (w: XdrWriter) => {
      w.u64(cookie).fixed(verf).u32(16384).u32(262144);
      bitmap(w, attrs);
    },
    read: (r: XdrReader) => {
      const cookieverf = r.fixed(8);
      const entries: ReaddirAttrsEntry[] = [];
      while (r.bool()) entries.push({ cookie: r.u64(), name: r.string(), attrs: readFattr(r) });
      return { cookieverf, entries, eof: r.bool() };
    },
  }),
  /**
   * CLONE (RFC 7862 §15.13): the saved handle's bytes from `srcOffset` shared into the current
   * handle at `dstOffset`; count 0 is "to the end of the source".
   */
  clone: (src: Stateid, dst: Stateid, srcOffset: number, dstOffset: number, count: number): Op4 => ({
    code: OP.CLONE,
    name: 'CLONE',
    args: (w) => w.fixed(src).fixed(dst).u64(srcOffset).u64(dstOffset).u64(count),
  }),
  /**
   * Intra-server COPY (RFC 7862 §15.2): saved handle to current handle, asked to be synchronous
   * (no callback channel here) and with no source server list. The reply's write_response4
   * carries a callback stateid only when the server went asynchronous anyway.
   */
  copy: (src: Stateid, dst: Stateid, srcOffset: number, dstOffset: number, count: number): Op4<Copied> => ({
    code: OP.COPY,
    name: 'COPY',
    args: (w) =>
      w
        .fixed(src)
        .fixed(dst)
        .u64(srcOffset)
        .u64(dstOffset)
        .u64(count)
        .bool(false) // ca_consecutive
        .bool(true) // ca_synchronous
        .u32(0), // ca_source_server<>: this server
    read: (r) => {
      const callbacks = r.u32();
      const callback = callbacks > 0 ? r.fixed(16) : undefined;
      const count = Number(r.u64());
      const committed = r.u32();
      const verf = r.fixed(8);
      r.bool(); // cr_consecutive
      r.bool(); // cr_synchronous
      return { callback, count, committed, verf };
    },
  }),
  offloadCancel: (stateid: Stateid): Op4 => ({
    code: OP.OFFLOAD_CANCEL,
    name: 'OFFLOAD_CANCEL',
    args: (w) => w.fixed(stateid),
  }),
};

/** What one COPY did: bytes copied, how stable (stable_how4) and the write verifier. */
export interface Copied {
  /** Present when the copy goes on asynchronously (the server ignored ca_synchronous). */
  callback: Stateid | undefined;
  count: number;
  committed: number;
  verf: Buffer;
}
