// Directory listing and recursive delete over NFS, written once for both protocol versions.
// Each store supplies a TreePort (READDIR pages, LOOKUP, REMOVE/RMDIR and how its errors read);
// the walk itself — cookies and BAD_COOKIE restarts, depth-first delete that never follows a
// symlink, bounded parallelism, retries while something writes into the tree — is here.
import { FailedPrecondition } from '../../errors.js';
import { boundaryError } from './ownership.js';
import type { FileType } from '../client/nfs3.js';
import type { NfsDirEntry, OpOptions } from './store.js';

export interface TreeEntry<H> {
  name: string;
  cookie: bigint;
  /** undefined when the listing did not say (a LOOKUP then asks). */
  type: FileType | undefined;
  handle?: H | undefined;
  /** The entry's file system, when the listing said. */
  fsid?: string | undefined;
}

export interface TreePage<H> {
  entries: TreeEntry<H>[];
  eof: boolean;
  cookieverf: Buffer;
}

export interface TreePort<H> {
  /** One page of a directory after `cookie` (0n first). `path` is for messages. */
  readdir(dir: H, cookie: bigint, verf: Buffer, path: string, signal: AbortSignal | undefined): Promise<TreePage<H>>;
  lookup(
    dir: H,
    name: string,
    path: string,
    signal: AbortSignal | undefined,
  ): Promise<{ handle: H; type: FileType; fsid: string }>;
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
   * Removes `name` in `parent` (already looked up: `target`), and everything below it when it is
   * a directory; entries written into it meanwhile are removed too, a few times over. Like
   * `rm --one-file-system`, but stricter: a directory on another file system than `fsid` (a
   * mount or an export inside the tree) stops the walk with FailedPrecondition.
   */
  async removeTree(
    parent: H,
    name: string,
    target: { handle: H; type: FileType; fsid: string },
    segs: string[],
    o: OpOptions & { fsid: string },
  ): Promise<void> {
    const path = this.port.where(segs);
    if (target.fsid !== o.fsid) throw boundaryError(this.port.describe(segs));
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
    let { type, handle, fsid } = e;
    if (type === undefined || fsid === undefined || (type === 'dir' && handle === undefined)) {
      try {
        ({ handle, type, fsid } = await this.port.lookup(dir, e.name, path, o.signal));
      } catch (err) {
        if (this.port.isMissing(err)) return;
        throw err;
      }
    }
    // Checked before anything in it is touched: nothing on the other side is ever removed.
    if (fsid !== o.fsid) throw boundaryError(this.port.describe(child));
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
