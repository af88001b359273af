// The copy of one directory tree to another over the controller's own NFS client, written once
// for any source (a claim directory, a snapshot) and any sink (a new snapshot, a new claim).
// What it keeps: every directory, regular file, symlink, FIFO, socket and device; mode (with
// setuid/setgid/sticky), owner, group, atime and mtime of each (ctime is the server's); hard links
// within the tree as hard links. Memory is bounded: at most `slots` files move at once per
// server, each one chunk at a time; the rest is one directory listing per directory being
// walked and one handle per multiply-linked file already copied. Where the server copies a file
// itself (NFSv4.2 CLONE or COPY: a ServerCopy), its bytes never pass through this process; the
// durability rule is the same either way: every write verifier of the file equals its COMMIT's.
import { Unavailable } from '../../../errors.js';
import type { FileType, NfsTime } from '../../client/nfs3.js';
import { boundaryError } from '../store/ownership.js';
import type { CopyStats, OpOptions } from '../store/store.js';
import { mapLimit } from '../../../map-limit.js';

export interface CopyAttrs {
  type: FileType;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  nlink: number;
  /** The object's identity on its file system: equal for the hard links of one file. */
  fileid: string;
  fsid: string;
  atime: NfsTime;
  mtime: NfsTime;
  rdev: { major: number; minor: number };
  /** NFSv4: the owner and group strings as the server sent them, set back verbatim. */
  owner?: string;
  group?: string;
}

export interface SourceEntry<S> {
  name: string;
  handle: S;
  attrs: CopyAttrs;
}

/** Reads of the tree being copied; `path` arguments are for messages. */
export interface CopySource<S> {
  entries(dir: S, path: string, o: OpOptions): Promise<SourceEntry<S>[]>;
  read(file: S, offset: number, count: number, path: string, o: OpOptions): Promise<{ data: Buffer; eof: boolean }>;
  readlink(link: S, path: string, o: OpOptions): Promise<string>;
}

/** Writes of the copy. Creates never replace: an existing name is an error. */
export interface CopySink<D> {
  mkdir(dir: D, name: string, path: string, o: OpOptions): Promise<D>;
  createFile(dir: D, name: string, path: string, o: OpOptions): Promise<D>;
  /** Writes all of `data` at `offset` (unstable); the server's write verifier. */
  write(file: D, offset: number, data: Buffer, path: string, o: OpOptions): Promise<Buffer>;
  /** Makes the file's writes durable; the server's write verifier. */
  commit(file: D, path: string, o: OpOptions): Promise<Buffer>;
  symlink(dir: D, name: string, target: string, path: string, o: OpOptions): Promise<D>;
  mknod(dir: D, name: string, a: CopyAttrs, path: string, o: OpOptions): Promise<D>;
  link(file: D, dir: D, name: string, path: string, o: OpOptions): Promise<void>;
  /** Owner and group first (a chown clears setuid/setgid), then mode and times. */
  setattrs(h: D, a: CopyAttrs, path: string, o: OpOptions): Promise<void>;
  /** Lets go of what createFile holds open (NFSv4's open state); after the file's last write, or its failure. */
  release?(file: D, path: string): Promise<void>;
}

/**
 * The server fills a file itself. `copy` resolves with the write verifiers of what it wrote (and
 * how), or null when the server cannot do it for this file and wrote nothing: the caller then
 * moves the bytes.
 */
export interface ServerCopy<S, D> {
  copy(
    from: SourceEntry<S>,
    to: D,
    path: string,
    o: OpOptions,
  ): Promise<{ how: 'clone' | 'copy'; verfs: Buffer[]; bytes: number } | null>;
}

export type { CopyStats };

export const emptyStats = (): CopyStats => ({
  dirs: 0,
  files: 0,
  symlinks: 0,
  hardLinks: 0,
  specials: 0,
  bytes: 0,
  cloned: 0,
  serverCopied: 0,
});

/** A counting semaphore: how many files of one server are being copied at once. */
export class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];
  constructor(readonly size: number) {
    this.free = size;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((r) => this.waiting.push(r));
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}

const perServer = new Map<string, Slots>();
/** Files in flight per NFS server, across every copy this process runs. */
export const COPY_SLOTS = 8;
/** Bytes per READ/WRITE: below every server's common rtmax/wtmax (128 KiB and up). */
export const CHUNK = 128 * 1024;

export function slotsFor(server: string): Slots {
  let s = perServer.get(server);
  if (!s) perServer.set(server, (s = new Slots(COPY_SLOTS)));
  return s;
}

export interface CopyOptions extends OpOptions {
  /** The source's file system: nothing on another one is copied (a mount inside the claim). */
  fsid: string;
  slots: Slots;
  /** Called at most every `progressMs` with the totals so far. */
  progress?: (s: CopyStats) => void;
  progressMs?: number;
  describe: (path: string) => string;
}

const DIR_PARALLEL = 4;
const join = (a: string, b: string) => (a ? `${a}/${b}` : b);

export class TreeCopy<S, D> {
  readonly stats = emptyStats();
  private readonly links = new Map<string, Promise<D>>();
  private lastProgress = Date.now();

  constructor(
    private readonly src: CopySource<S>,
    private readonly sink: CopySink<D>,
    private readonly o: CopyOptions,
    private readonly server?: ServerCopy<S, D>,
  ) {}

  /** Copies the contents of `from` into the existing (empty) directory `to`, then its attributes. */
  async run(from: S, attrs: CopyAttrs, to: D, path: string): Promise<CopyStats> {
    await this.dir(from, to, path);
    await this.sink.setattrs(to, attrs, path, this.o);
    this.stats.dirs++;
    this.o.progress?.(this.stats);
    return this.stats;
  }

  private async dir(from: S, to: D, path: string): Promise<void> {
    const entries = await this.o.slots.run(() => this.src.entries(from, path, this.o));
    await mapLimit(entries, DIR_PARALLEL, (e) => this.entry(e, to, join(path, e.name)));
  }

  private async entry(e: SourceEntry<S>, dir: D, path: string): Promise<void> {
    this.o.signal?.throwIfAborted();
    if (e.attrs.fsid !== this.o.fsid) throw boundaryError(this.o.describe(path));
    const a = e.attrs;
    const slot = <T>(fn: () => Promise<T>) => this.o.slots.run(fn);
    if (a.type === 'dir') {
      const d = await slot(() => this.sink.mkdir(dir, e.name, path, this.o));
      await this.dir(e.handle, d, path);
      // After the children: adding them changed the directory's mtime, a read-only mode would stop them.
      await slot(() => this.sink.setattrs(d, a, path, this.o));
      this.stats.dirs++;
    } else if (a.type === 'file') {
      await this.file(e, dir, path);
    } else if (a.type === 'symlink') {
      await slot(async () => {
        const target = await this.src.readlink(e.handle, path, this.o);
        const h = await this.sink.symlink(dir, e.name, target, path, this.o);
        await this.sink.setattrs(h, a, path, this.o);
      });
      this.stats.symlinks++;
    } else {
      await slot(async () => this.sink.setattrs(await this.sink.mknod(dir, e.name, a, path, this.o), a, path, this.o));
      this.stats.specials++;
    }
    this.tick();
  }

  private async file(e: SourceEntry<S>, dir: D, path: string): Promise<void> {
    const first = e.attrs.nlink > 1 ? this.links.get(e.attrs.fileid) : undefined;
    if (first) {
      const h = await first;
      await this.o.slots.run(() => this.sink.link(h, dir, e.name, path, this.o));
      this.stats.hardLinks++;
      return;
    }
    const p = this.o.slots.run(() => this.content(e, dir, path));
    if (e.attrs.nlink > 1) this.links.set(e.attrs.fileid, p);
    await p;
    this.stats.files++;
  }

  private async content(e: SourceEntry<S>, dir: D, path: string): Promise<D> {
    const h = await this.sink.createFile(dir, e.name, path, this.o);
    const verfs = new Set<string>();
    let committed: Buffer;
    try {
      const done = e.attrs.size > 0 && this.server ? await this.server.copy(e, h, path, this.o) : null;
      if (done) {
        for (const v of done.verfs) verfs.add(v.toString('hex'));
        this.stats.bytes += done.bytes;
        if (done.how === 'clone') this.stats.cloned++;
        else this.stats.serverCopied++;
      }
      for (let off = 0; !done;) {
        const r = await this.src.read(e.handle, off, CHUNK, path, this.o);
        if (r.data.length > 0) {
          verfs.add((await this.sink.write(h, off, r.data, path, this.o)).toString('hex'));
          off += r.data.length;
          this.stats.bytes += r.data.length;
        }
        if (r.eof || r.data.length === 0) break;
      }
      committed = await this.sink.commit(h, path, this.o);
    } finally {
      await this.sink.release?.(h, path);
    }
    if (verfs.size > 1 || (verfs.size === 1 && !verfs.has(committed.toString('hex')))) {
      // The server restarted between WRITE and COMMIT: unstable data may be lost.
      throw new Unavailable(`${this.o.describe(path)}: the NFS server restarted during the copy; it is retried`);
    }
    await this.sink.setattrs(h, e.attrs, path, this.o);
    return h;
  }

  private tick(): void {
    const every = this.o.progressMs ?? 5000;
    if (!this.o.progress || Date.now() - this.lastProgress < every) return;
    this.lastProgress = Date.now();
    this.o.progress(this.stats);
  }
}
