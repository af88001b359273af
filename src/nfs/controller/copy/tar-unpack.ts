// Unpacks a tar archive (gzip-compressed or not: the first bytes tell) read over the
// controller's NFS client into a new, empty directory, through the same sink as the tree copy
// (copy-tree.ts): what csi-driver-nfs's snapshots are, `<baseDir>/<name>/<src>.tar.gz` made by
// `tar -czf … .` or Go's archive/tar. What the archive records is kept: mode (set-id and sticky
// included), numeric owner and group, mtime (and atime where a PAX header has one, else the
// mtime), symlinks, hard links, FIFOs and devices. Streaming: one entry at a time, each file in
// chunks as the archive yields them; memory is one handle and one set of attributes per
// directory of the archive (directories get their attributes after their last entry).
// Names are checked by tar-paths.ts; an entry is made only inside a directory this archive made.
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import tar from 'tar-stream';
import { type CsiError, InvalidArgument, OutOfRange, Unavailable, isCsiError } from '../../../errors.js';
import type { FileType, NfsTime } from '../../client/nfs3.js';
import { type CopyAttrs, type CopySink, type CopyStats, CHUNK, type Slots, emptyStats } from './copy-tree.js';
import type { OpOptions } from '../store/store.js';
import { entrySegments, printable } from './tar-paths.js';

export interface UnpackSink<D> extends CopySink<D> {
  /** The entry `name` of `dir`, or null when there is none. */
  lookup(dir: D, name: string, path: string, o: OpOptions): Promise<{ handle: D; type: FileType } | null>;
}

/** The archive's bytes, read in order. */
export type ArchiveReader = (offset: number, count: number) => Promise<{ data: Buffer; eof: boolean }>;

export interface UnpackOptions extends OpOptions {
  slots: Slots;
  progress?: (s: CopyStats) => void;
  progressMs?: number;
  /** The archive, for messages. */
  archive: string;
  /** The most file data the archive may unpack (the claim's requested capacity); none: unbounded. */
  maxBytes?: number | undefined;
}

/** The largest uid or gid an NFS client can set (32 bits; 2^32-1 is "nobody"/no id on many servers). */
const MAX_ID = 2 ** 32 - 2;

const KINDS: Partial<Record<tar.Header['type'], FileType>> = {
  file: 'file',
  'contiguous-file': 'file',
  directory: 'dir',
  symlink: 'symlink',
  'character-device': 'char',
  'block-device': 'block',
  fifo: 'fifo',
};

/** A PAX time (`1600000000.123456789`), exact to the nanosecond. */
function paxTime(v: unknown): NfsTime | undefined {
  if (typeof v !== 'string' || !/^-?\d+(\.\d+)?$/.test(v)) return undefined;
  const [s = '0', f = ''] = v.split('.');
  return { sec: Number(s), nsec: Number((f + '000000000').slice(0, 9)) };
}

export function headerAttrs(h: tar.Header, type: FileType): CopyAttrs {
  const pax = (h.pax ?? {}) as Record<string, unknown>;
  const mtime = paxTime(pax.mtime) ?? { sec: Math.floor(h.mtime.getTime() / 1000), nsec: 0 };
  return {
    type,
    mode: h.mode & 0o7777,
    uid: h.uid,
    gid: h.gid,
    size: h.size,
    nlink: 1,
    fileid: '',
    fsid: '',
    atime: paxTime(pax.atime) ?? mtime,
    mtime,
    rdev: { major: h.devmajor, minor: h.devminor },
  };
}

async function* chunks(read: ArchiveReader, signal: AbortSignal | undefined): AsyncGenerator<Buffer> {
  for (let off = 0; ;) {
    signal?.throwIfAborted();
    const r = await read(off, CHUNK);
    if (r.data.length > 0) yield r.data;
    off += r.data.length;
    if (r.eof || r.data.length === 0) return;
  }
}

/** The archive's tar stream: gunzipped when it starts with gzip's magic bytes. */
async function tarStream(read: ArchiveReader, signal: AbortSignal | undefined): Promise<Readable> {
  const it = chunks(read, signal);
  const first = await it.next();
  const head = first.done ? Buffer.alloc(0) : first.value;
  async function* all() {
    if (head.length) yield head;
    yield* it;
  }
  const raw = Readable.from(all());
  if (head[0] !== 0x1f || head[1] !== 0x8b) return raw;
  const gunzip = createGunzip();
  raw.on('error', (e) => gunzip.destroy(e));
  return raw.pipe(gunzip);
}

class Unpacker<D> {
  readonly stats = emptyStats();
  private readonly dirs = new Map<string, D>();
  private readonly dirAttrs = new Map<string, CopyAttrs>();
  private lastProgress = Date.now();

  constructor(
    private readonly sink: UnpackSink<D>,
    root: D,
    private readonly o: UnpackOptions,
  ) {
    this.dirs.set('', root);
  }

  private bad(name: string, why: string): CsiError {
    return new InvalidArgument(
      `archive ${this.o.archive}: entry "${printable(name)}" ${why}; the restore stops and its partial claim is removed on the next attempt`,
    );
  }

  /** The directory made by this archive that holds an entry, and the entry's name in it. */
  private placeOf(name: string, segs: string[]): { dir: D; leaf: string; path: string } {
    const parent = segs.slice(0, -1).join('/');
    const dir = this.dirs.get(parent);
    if (dir === undefined) {
      throw this.bad(name, `lies in "${printable(parent)}", which is not a directory this archive made before it`);
    }
    return { dir, leaf: segs.at(-1) ?? '', path: segs.join('/') };
  }

  /** Creates, mapping a name the archive already used to a clear error. */
  private async made<T>(name: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await this.o.slots.run(fn);
    } catch (e) {
      if (isCsiError(e, 'AlreadyExists')) throw this.bad(name, 'names something the archive already made');
      throw e;
    }
  }

  async entry(h: tar.Header, body: AsyncIterable<Buffer>): Promise<void> {
    this.o.signal?.throwIfAborted();
    const segs = entrySegments(h.name);
    const type = KINDS[h.type];
    if (h.type === 'link') {
      await this.hardLink(h, segs);
      this.tick();
      return;
    }
    if (type === undefined) throw this.bad(h.name, `is a ${h.type} entry, which this driver does not unpack`);
    for (const [what, id] of [
      ['uid', h.uid],
      ['gid', h.gid],
    ] as const)
      if (!Number.isSafeInteger(id) || id < 0 || id > MAX_ID)
        throw this.bad(
          h.name,
          `records ${what} ${id}, outside 0..${MAX_ID}: it cannot be set over NFS and is not wrapped`,
        );
    const max = this.o.maxBytes;
    if (type === 'file' && max !== undefined && this.stats.bytes + h.size > max)
      throw new OutOfRange(
        `${this.o.archive}: entry "${printable(h.name)}" declares ${h.size} bytes, which with the ${this.stats.bytes} ` +
          `unpacked before it is more than the claim's requested capacity (${max} bytes): request a larger volume`,
      );
    const a = headerAttrs(h, type);
    if (segs.length === 0) {
      if (type !== 'dir') throw this.bad(h.name, 'names the target itself but is not a directory');
      this.dirAttrs.set('', a);
      return;
    }
    const { dir, leaf, path } = this.placeOf(h.name, segs);
    const s = this.sink;
    const o = this.o;
    if (type === 'dir') {
      if (this.dirs.has(path)) {
        this.dirAttrs.set(path, a); // a directory listed again: its last attributes win, as with tar
        return;
      }
      this.dirs.set(path, await this.made(h.name, () => s.mkdir(dir, leaf, path, o)));
      this.dirAttrs.set(path, a);
      this.stats.dirs++;
    } else if (type === 'file') {
      const f = await this.made(h.name, () => s.createFile(dir, leaf, path, o));
      await this.o.slots.run(() => this.content(f, body, path, a));
      this.stats.files++;
    } else if (type === 'symlink') {
      // Made as recorded and never followed: nothing below is created through it (placeOf).
      await this.made(h.name, async () => s.setattrs(await s.symlink(dir, leaf, h.linkname, path, o), a, path, o));
      this.stats.symlinks++;
    } else {
      await this.made(h.name, async () => s.setattrs(await s.mknod(dir, leaf, a, path, o), a, path, o));
      this.stats.specials++;
    }
    this.tick();
  }

  private async content(f: D, body: AsyncIterable<Buffer>, path: string, a: CopyAttrs): Promise<void> {
    const verfs = new Set<string>();
    let committed: Buffer;
    try {
      let off = 0;
      for await (const data of body) {
        const max = this.o.maxBytes;
        if (max !== undefined && this.stats.bytes + data.length > max)
          throw new OutOfRange(`${this.o.archive}: ${path} holds more data than its header declares`);
        verfs.add((await this.sink.write(f, off, data, path, this.o)).toString('hex'));
        off += data.length;
        this.stats.bytes += data.length;
      }
      committed = await this.sink.commit(f, path, this.o);
    } finally {
      await this.sink.release?.(f, path);
    }
    if (verfs.size > 1 || (verfs.size === 1 && !verfs.has(committed.toString('hex')))) {
      throw new Unavailable(`${this.o.archive}: the NFS server restarted while ${path} was unpacked; it is retried`);
    }
    await this.sink.setattrs(f, a, path, this.o);
  }

  private async hardLink(h: tar.Header, segs: string[]): Promise<void> {
    if (segs.length === 0) throw this.bad(h.name, 'is a hard link in place of the target itself');
    const { dir, leaf, path } = this.placeOf(h.name, segs);
    const tsegs = entrySegments(h.linkname);
    const to = tsegs.length ? this.dirs.get(tsegs.slice(0, -1).join('/')) : undefined;
    const found = to === undefined ? null : await this.sink.lookup(to, tsegs.at(-1) ?? '', path, this.o);
    if (!found || found.type !== 'file') {
      throw this.bad(h.name, `is a hard link to "${printable(h.linkname)}", which is not a file this archive made`);
    }
    await this.made(h.name, () => this.sink.link(found.handle, dir, leaf, path, this.o));
    this.stats.hardLinks++;
  }

  /** Directories' attributes, deepest first: a parent's mtime is set after its children change it. */
  async finish(): Promise<void> {
    const order = [...this.dirAttrs.keys()].sort((x, y) => depth(y) - depth(x));
    for (const p of order) {
      const d = this.dirs.get(p);
      const a = this.dirAttrs.get(p);
      if (d !== undefined && a) await this.o.slots.run(() => this.sink.setattrs(d, a, p, this.o));
    }
    this.o.progress?.(this.stats);
  }

  private tick(): void {
    const every = this.o.progressMs ?? 5000;
    if (!this.o.progress || Date.now() - this.lastProgress < every) return;
    this.lastProgress = Date.now();
    this.o.progress(this.stats);
  }
}

const depth = (p: string) => (p === '' ? 0 : p.split('/').length);

/** Unpacks the archive into the existing, empty directory `root`; the totals. */
export async function unpackTar<D>(
  read: ArchiveReader,
  sink: UnpackSink<D>,
  root: D,
  o: UnpackOptions,
): Promise<CopyStats> {
  const bytes = await tarStream(read, o.signal);
  const extract = tar.extract();
  bytes.on('error', (e) => extract.destroy(e));
  bytes.pipe(extract);
  const u = new Unpacker(sink, root, o);
  try {
    for await (const entry of extract) {
      await u.entry(entry.header, entry as AsyncIterable<Buffer>);
      entry.resume(); // whatever the entry's body had left (none for a file, the whole of others)
    }
  } catch (e) {
    throw archiveError(e, o.archive);
  } finally {
    bytes.destroy();
    extract.destroy();
  }
  await u.finish();
  return u.stats;
}

/** A broken archive (bad gzip, bad tar header, truncated) is bad input, not a server fault. */
function archiveError(e: unknown, archive: string): unknown {
  if (isCsiError(e) || !(e instanceof Error)) return e;
  const code = (e as NodeJS.ErrnoException).code ?? '';
  // A body shorter than its header declares (a truncated entry, a PAX size beyond the data) ends
  // the stream early; tar-stream reports that as the stream being destroyed.
  if (code === 'ERR_STREAM_PREMATURE_CLOSE' || /stream was destroyed/i.test(e.message)) {
    return new InvalidArgument(
      `archive ${archive} is truncated: an entry declares more data than the archive holds (${e.message})`,
    );
  }
  if (/^Z_/.test(code) || /tar|header|unexpected end|premature/i.test(e.message)) {
    return new InvalidArgument(`archive ${archive} is not a readable tar or tar.gz file: ${e.message}`);
  }
  return e;
}
