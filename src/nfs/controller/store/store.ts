// The port between the NFS controller logic and the NAS. The protocol adapters implement it over
// NFSv3 (nfs3-store.ts) and NFSv4 (nfs4-store.ts), stores.ts picks one per server; unit tests use
// an in-memory fake.
//
// Paths are relative to the share root, '/'-separated, without empty, '.' or '..' segments
// (params.ts validates them). The empty path is the share root itself, which no mutating
// method accepts.
import type { BackendHealth } from '../../../csi/health.js';
import { InvalidArgument } from '../../../errors.js';
import type { FileType, FsStat } from '../../client/nfs3.js';

export type { FileType, FsStat };

/** The segments of a share-relative path; the share root itself only when `allowRoot`. */
export function pathSegments(path: string, allowRoot = false): string[] {
  const segs = path === '' ? [] : path.split('/');
  for (const s of segs) {
    if (s === '' || s === '.' || s === '..') throw new InvalidArgument(`invalid path "${path}" on the NFS share`);
  }
  if (!allowRoot && segs.length === 0) throw new InvalidArgument('refusing to modify the share root itself');
  return segs;
}

/** The last name of a path's segments and its parent's segments (the share root has neither). */
export function lastOf(segs: readonly string[]): { parent: string[]; name: string } {
  const name = segs.at(-1);
  if (name === undefined) throw new InvalidArgument('refusing to modify the share root itself');
  return { parent: segs.slice(0, -1), name };
}

/** The server path of segments below the share, for messages. */
export function sharePath(share: string, segs: readonly string[]): string {
  return segs.length ? `${share.replace(/\/$/, '')}/${segs.join('/')}` : share;
}

export interface NfsStat {
  type: FileType;
  /** Permission bits, mode & 0o7777. */
  mode: number;
  uid: number;
  gid: number;
  /** Bytes (a file's length; a directory's own entry size). */
  size?: number;
  /** Last modification, ms since the epoch (a directory's: its last entry added or removed). */
  mtimeMs?: number;
  /** Last status change, ms since the epoch (a rename of the entry itself sets it). */
  ctimeMs?: number;
}

export interface NfsDirEntry {
  name: string;
  type: FileType;
}

export interface DirAttrs {
  mode?: number | undefined;
  uid?: number | undefined;
  gid?: number | undefined;
}

export interface OpOptions {
  signal?: AbortSignal;
}

export interface CopyTreeOptions extends OpOptions {
  /** Totals so far, every few seconds and at the end. */
  progress?: (s: CopyStats) => void;
  /** An unpack's bound on file data (the claim's requested capacity); none: unbounded. */
  maxBytes?: number | undefined;
}

export type RmdirResult = 'removed' | 'not-empty' | 'missing';

/** One share of one NFS server. Every method is idempotent and safe to retry. */
export interface NfsStore {
  readonly server: string;
  /** Absolute path on the server, e.g. /volume1/k8s-volumes/talos. */
  readonly share: string;
  /**
   * Creates `path` and missing parents (parents 0755, owned by root), then makes the directory's
   * mode/uid/gid equal to `attrs` (absent fields left as created; a new directory gets 0755).
   * An existing directory is accepted; an existing non-directory is FailedPrecondition.
   */
  ensureDir(path: string, attrs: DirAttrs, o?: OpOptions): Promise<NfsStat>;
  /** null when the path does not exist. Symlinks are reported, never followed. */
  stat(path: string, o?: OpOptions): Promise<NfsStat | null>;
  /** Entries of a directory, without . and ..; NotFound when it does not exist. */
  list(path: string, o?: OpOptions): Promise<NfsDirEntry[]>;
  /**
   * Removes `path` and, when it is a directory, everything below it. Never follows symlinks.
   * Resolves false when nothing was there.
   */
  removeTree(path: string, o?: OpOptions): Promise<boolean>;
  /** rmdir that leaves non-empty directories (and non-directories) alone. */
  removeDirIfEmpty(path: string, o?: OpOptions): Promise<RmdirResult>;
  /**
   * Renames `from` to `to`, creating the parents of `to`. Never replaces: AlreadyExists when
   * `to` exists, NotFound when `from` does not.
   */
  rename(from: string, to: string, o?: OpOptions): Promise<void>;
  /** Space and inodes of the file system behind the share. */
  statfs(o?: OpOptions): Promise<FsStat>;
  /**
   * Copies the directory `from` and everything below it to `to` (copy-tree.ts says what is
   * kept), creating the parents of `to`. AlreadyExists when `to` exists; NotFound when `from`
   * does not.
   */
  copyTree(from: string, to: string, o?: CopyTreeOptions): Promise<CopyStats>;
  /**
   * Unpacks the tar or tar.gz file `archive` into the new directory `to` (tar-unpack.ts says
   * what is kept and refused), creating the parents of `to`. AlreadyExists when `to` exists;
   * NotFound when `archive` does not; InvalidArgument for an unreadable or unsafe archive.
   */
  unpackArchive(archive: string, to: string, o?: CopyTreeOptions): Promise<CopyStats>;
}

/** One existing directory entry on the way from the share down to a path. */
export interface PathStep {
  name: string;
  type: FileType;
  /** The file system it is on, as the protocol names it (NFSv3 fsid3, NFSv4 fsid4 major:minor). */
  fsid: string;
  /** NFSv4: the root of a file system mounted or exported here (mounted_on_fileid != fileid). */
  junction: boolean;
}

/** What the server says about a share and a path below it, read when a change is decided. */
export interface PathFacts {
  share: {
    fsid: string;
    /**
     * The server lets this client change entries in the share: a directory inside an export
     * (NFSv3: what MOUNT handed out; NFSv4: ACCESS grants MODIFY, EXTEND and DELETE). An NFSv4
     * pseudo-filesystem node (nfs-ganesha's PSEUDO, Linux's v4root) is read-only: false.
     */
    writable: boolean;
  };
  /** The path's segments that exist, in order; it ends at the first missing one or a non-directory. */
  steps: PathStep[];
  /**
   * NFSv3: other exports strictly below the share, relative to it (MOUNT EXPORT). v3 LOOKUP
   * never crosses into them and reports no other fsid, so the export list is the only witness.
   */
  exportsBelow?: string[];
  /** What the walk below the path found (only when asked for and the path is a directory). */
  below?: TreeFacts;
}

export interface InspectOptions extends OpOptions {
  /**
   * Also walk the path, when it is an existing directory, for the first entry below it on
   * another file system than the share or at a junction, reading at most this many entries.
   */
  walkLimit?: number | undefined;
}

/** What a bounded walk of a directory found below it (PathFacts.below). */
export interface TreeFacts {
  /** The first entry on another file system than the one asked for, or an NFSv4 junction. */
  boundary?: string[] | undefined;
  /** Entries read (not . and ..). */
  entries: number;
  /** Every entry below the directory was read; false when the walk stopped at its limit. */
  complete: boolean;
}

/**
 * The protocol half of a store: reads, plus changes that take a permit from the ownership gate
 * (ownership.ts). Only the gate makes permits, and only it wraps a RawNfsStore into an NfsStore.
 */
export interface RawNfsStore {
  readonly server: string;
  readonly share: string;
  inspect(path: string, o?: InspectOptions): Promise<PathFacts>;
  stat(path: string, o?: OpOptions): Promise<NfsStat | null>;
  list(path: string, o?: OpOptions): Promise<NfsDirEntry[]>;
  statfs(o?: OpOptions): Promise<FsStat>;
  ensureDir(permit: Permit, attrs: DirAttrs, o?: OpOptions): Promise<NfsStat>;
  removeTree(permit: Permit, o?: OpOptions): Promise<boolean>;
  removeDirIfEmpty(permit: Permit, o?: OpOptions): Promise<RmdirResult>;
  rename(permit: Permit, o?: OpOptions): Promise<void>;
  copyTree(permit: Permit, o?: CopyTreeOptions): Promise<CopyStats>;
  unpackArchive(permit: Permit, o?: CopyTreeOptions): Promise<CopyStats>;
}

/** What the gate allowed: one change of one path (and a rename's target) on one file system. */
export interface Permit {
  readonly op: 'create' | 'delete' | 'rmdir' | 'rename' | 'copy' | 'unpack';
  readonly path: string;
  /** The rename's, copy's or unpack's target (a copy or unpack creates it; `path` is only read). */
  readonly to?: string | undefined;
  /** The share's file system: every directory the change reaches must be on it. */
  readonly fsid: string;
}

/** NFS protocol version of the controller's own client; '4' = the newest of 4.2, 4.1, 4.0 the server has. */
export type NfsVersion = '3' | '4' | '4.0' | '4.1' | '4.2';

export interface NfsStores {
  /**
   * `share` is an absolute server path. Cheap: connections are shared per server. Without a
   * version, NFSv3 is tried first and NFSv4 when the server has no v3 service (stores.ts).
   */
  open(server: string, share: string, version?: NfsVersion): NfsStore;
  /** Resolves when every server used so far answers (NFS NULL); rejects otherwise. */
  ping(signal?: AbortSignal): Promise<void>;
  /** Per server with an open session: does it answer NFS NULL. */
  health(signal?: AbortSignal): Promise<BackendHealth[]>;
  /** Servers with an open session (idle ones are closed). */
  servers(): string[];
  close(): Promise<void>;
}

/** What a tree copy (../copy/copy-tree.ts) did: the port's copy answers with it. */
export interface CopyStats {
  dirs: number;
  files: number;
  symlinks: number;
  hardLinks: number;
  specials: number;
  bytes: number;
  /** Files the server cloned (shares their blocks) / copied itself; the rest passed through here. */
  cloned: number;
  serverCopied: number;
}
