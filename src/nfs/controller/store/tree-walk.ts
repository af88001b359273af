// Directory listing and recursive delete over NFS, written once for both protocol versions.
// Each store supplies a TreePort (READDIR pages, LOOKUP, REMOVE/RMDIR and how its errors read);
// the walk itself — cookies and BAD_COOKIE restarts, depth-first delete that never follows a
// symlink, bounded parallelism, retries while something writes into the tree — is here.
import { FailedPrecondition } from '../../../errors.js';
import { boundaryError } from './ownership.js';
import type { FileType } from '../../client/nfs3.js';
import type { NfsDirEntry, OpOptions, TreeFacts } from './store.js';

export interface TreeEntry<H> {
  name: string;
  cookie: bigint;
  /** undefined when the listing did not say (a LOOKUP then asks). */
  type: FileType | undefined;
  handle?: H | undefined;
  /** The entry's file system, when the listing said. */
  fsid?: string | undefined;
  /** NFSv4: a file system or export begins at the entry (mounted_on_fileid != fileid). */
  junction?: boolean | undefined;
}

/** What LOOKUP tells of an entry. */
export interface Looked<H> {
  handle: H;
  type: FileType;
  fsid: string;
  junction?: boolean | undefined;
}

export interface TreePage<H> {
  entries: TreeEntry<H>[];
  eof: boolean;
  cookieverf: Buffer;
}

export interface TreePort<H> {
  /** One page of a directory after `cookie` (0n first). `path` is for messages. */
  readdir(dir: H, cookie: bigint, verf: Buffer, path: string, signal: AbortSignal | undefined): Promise<TreePage<H>>;
  lookup(dir: H, name: string, path: string, signal: AbortSignal | undefined): Promise<Looked<H>>;
  removeFile(dir: H, name: string, path: string, signal: AbortSignal | undefined): Promise<void>;
  /** Removes an empty directory. */
  removeDir(dir: H, name: string, path: string, signal: AbortSignal | undefined): Promise<void>;
  /** The entry is gone (NOENT). */
  isMissing(e: unknown): boolean;
  /** The cookie is no longer valid: the listing starts over. */
  isBadCookie(e: unknown): boolean;
  /** RMDIR found entries again (NOTEMPTY, or EXIST as some servers say). */
  isNotEmpty(e: unknown): boolean;
  /** `server:/share/path` of a path below the share, for messages. */
  describe(segs: readonly string[]): string;
  /** The share-relative path, for the protocol's own messages. */
  where(segs: readonly string[]): string;
}

/** Entries removed in parallel within one directory. */
const PARALLEL = 16;

/** Directories listed in parallel by a scan. */
const SCAN_PARALLEL = 8;

/** An entry on another file system than `fsid`, or where one begins. */
const crosses = (e: { fsid?: string | undefined; junction?: boolean | undefined }, fsid: string) =>
  e.fsid !== fsid || e.junction === true;

export class TreeWalker<H> {
  constructor(private readonly port: TreePort<H>) {}

  /** Every entry of `dir` but . and .. (a BAD_COOKIE restarts the listing once). */
  async readAll(dir: H, segs: string[], o: OpOptions): Promise<TreeEntry<H>[]> {
    const path = this.port.where(segs);
    let out: TreeEntry<H>[] = [];
    let cookie = 0n;
    let verf: Buffer = Buffer.alloc(8);
    let restarted = false;
    for (;;) {
      let page: TreePage<H>;
      try {
        page = await this.port.readdir(dir, cookie, verf, path, o.signal);
      } catch (e) {
        if (restarted || !this.port.isBadCookie(e)) throw e;
        restarted = true;
        out = [];
        cookie = 0n;
        verf = Buffer.alloc(8);
        continue;
      }
      for (const e of page.entries) if (e.name !== '.' && e.name !== '..') out.push(e);
      const last = page.entries[page.entries.length - 1];
      if (page.eof || !last) return out;
      cookie = last.cookie;
      verf = page.cookieverf;
    }
  }

  /** Names and types of a directory's entries. */
  async list(dir: H, segs: string[], o: OpOptions): Promise<NfsDirEntry[]> {
    const out: NfsDirEntry[] = [];
    for (const e of await this.readAll(dir, segs, o)) {
      const type = e.type ?? (await this.port.lookup(dir, e.name, this.port.where([...segs, e.name]), o.signal)).type;
      out.push({ name: e.name, type });
    }
    return out;
  }

  /**
   * Breadth-first walk of `dir` (never following a symlink) for the first entry on another file
   * system than `o.fsid` or at a junction; stops after `o.limit` entries (complete: false).
   */
  async scan(dir: H, segs: string[], o: OpOptions & { fsid: string; limit: number }): Promise<TreeFacts> {
    let entries = 0;
    let frontier: Array<{ dir: H; segs: string[] }> = [{ dir, segs }];
    while (frontier.length) {
      const next: typeof frontier = [];
      for (let i = 0; i < frontier.length; i += SCAN_PARALLEL) {
        const found = await Promise.all(frontier.slice(i, i + SCAN_PARALLEL).map((d) => this.scanDir(d, o)));
        for (const f of found) {
          entries += f.entries;
          if (f.boundary) return { boundary: f.boundary, entries, complete: false };
          next.push(...f.dirs);
        }
        if (entries > o.limit) return { entries, complete: false };
      }
      frontier = next;
    }
    return { entries, complete: true };
  }

  /** One directory of a scan: its subdirectories, or the first boundary among its entries. */
  private async scanDir(
    d: { dir: H; segs: string[] },
    o: OpOptions & { fsid: string },
  ): Promise<{ entries: number; boundary?: string[]; dirs: Array<{ dir: H; segs: string[] }> }> {
    const listed = await this.readAll(d.dir, d.segs, o);
    const dirs: Array<{ dir: H; segs: string[] }> = [];
    for (const e of listed) {
      const child = [...d.segs, e.name];
      const known = e.type !== undefined && e.fsid !== undefined && (e.type !== 'dir' || e.handle !== undefined);
      let at: Pick<TreeEntry<H>, 'type' | 'fsid' | 'junction' | 'handle'>;
      try {
        at = known ? e : await this.port.lookup(d.dir, e.name, this.port.where(child), o.signal);
      } catch (err) {
        if (this.port.isMissing(err)) continue; // removed meanwhile
        throw err;
      }
      if (crosses(at, o.fsid)) return { entries: listed.length, boundary: child, dirs };
      if (at.type === 'dir' && at.handle !== undefined) dirs.push({ dir: at.handle, segs: child });
    }
    return { entries: listed.length, dirs };
  }

  /**
   * Removes `name` in `parent` (already looked up: `target`), and everything below it when it is
   * a directory; entries written into it meanwhile are removed too, a few times over. Like
   * `rm --one-file-system`, but stricter: a directory on another file system than `fsid` (a
   * mount or an export inside the tree) stops the walk with FailedPrecondition.
   */
  async removeTree(
    parent: H,
    name: string,
    target: Looked<H>,
    segs: string[],
    o: OpOptions & { fsid: string },
  ): Promise<void> {
    const path = this.port.where(segs);
    if (crosses(target, o.fsid)) throw boundaryError(this.port.describe(segs));
    if (target.type !== 'dir') return this.ignoreMissing(this.port.removeFile(parent, name, path, o.signal));
    for (let pass = 0; ; pass++) {
      await this.emptyDir(target.handle, segs, o);
      try {
        await this.ignoreMissing(this.port.removeDir(parent, name, path, o.signal));
        return;
      } catch (e) {
        if (pass < 3 && this.port.isNotEmpty(e)) continue; // written to meanwhile
        throw e;
      }
    }
  }

  /** Deletes everything inside `dir` (depth-first, never following symlinks). */
  private async emptyDir(dir: H, segs: string[], o: OpOptions & { fsid: string }): Promise<void> {
    for (let pass = 0; pass < 5; pass++) {
      const entries = await this.readAll(dir, segs, o);
      if (entries.length === 0) return;
      for (let i = 0; i < entries.length; i += PARALLEL) {
        // Settled, not Promise.all: a refusal (a boundary) must not return while removals of its
        // siblings still run, or the call answers while it goes on changing the tree.
        const done = await Promise.allSettled(
          entries.slice(i, i + PARALLEL).map((e) => this.removeEntry(dir, segs, e, o)),
        );
        const failed = done.find((r) => r.status === 'rejected');
        if (failed) throw failed.reason;
      }
    }
    throw new FailedPrecondition(
      `${this.port.describe(segs)} keeps getting new entries while being deleted; is a pod still writing to it?`,
    );
  }

  private async removeEntry(dir: H, segs: string[], e: TreeEntry<H>, o: OpOptions & { fsid: string }): Promise<void> {
    const child = [...segs, e.name];
    const path = this.port.where(child);
    let { type, handle, fsid, junction } = e;
    if (type === undefined || fsid === undefined || (type === 'dir' && handle === undefined)) {
      try {
        ({ handle, type, fsid, junction } = await this.port.lookup(dir, e.name, path, o.signal));
      } catch (err) {
        if (this.port.isMissing(err)) return;
        throw err;
      }
    }
    // Checked before anything in it is touched: nothing on the other side is ever removed.
    if (crosses({ fsid, junction }, o.fsid)) throw boundaryError(this.port.describe(child));
    if (type !== 'dir') return this.ignoreMissing(this.port.removeFile(dir, e.name, path, o.signal));
    // A LOOKUP always answers with a handle; a listed directory without one was looked up above.
    if (handle === undefined)
      throw new FailedPrecondition(`${this.port.describe(child)}: the server gave no handle for a directory`);
    await this.emptyDir(handle, child, o);
    await this.ignoreMissing(this.port.removeDir(dir, e.name, path, o.signal));
  }

  private async ignoreMissing(p: Promise<void>): Promise<void> {
    try {
      await p;
    } catch (e) {
      if (!this.port.isMissing(e)) throw e;
    }
  }
}
