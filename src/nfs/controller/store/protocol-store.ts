// What the NFSv3 and NFSv4 stores share once their protocol calls are set aside: paths for
// messages, what a status code means to the store (gone, not a directory, not empty...), the
// tree walker built from the protocol's READDIR/LOOKUP/REMOVE, and the outcome rules of
// rmdir, rename and ensureDir. Each store keeps only how it talks to the server (v3: handles
// from a cached root and one call per step; v4: COMPOUNDs from PUTROOTFH).
import { AlreadyExists, NotFound } from '../../../errors.js';
import type { BackendHealth } from '../../../csi/health.js';
import {
  type DirAttrs,
  type InspectOptions,
  type NfsStat,
  type OpOptions,
  type PathFacts,
  type Permit,
  type RmdirResult,
  sharePath,
} from './store.js';
import { admitted } from './ownership.js';
import { type TreePort, TreeWalker } from './tree-walk.js';

/** How one protocol's errors read; each is a test of a thrown status. */
export interface StatusKinds {
  /** NOENT. */
  missing(e: unknown): boolean;
  /** NOTDIR: a path component is not a directory. */
  notDir(e: unknown): boolean;
  /** NOTEMPTY or EXIST on RMDIR/REMOVE of a directory. */
  notEmpty(e: unknown): boolean;
  badCookie(e: unknown): boolean;
}

/** The protocol calls the tree walker needs. */
export type TreeIo<H> = Pick<TreePort<H>, 'readdir' | 'lookup' | 'removeFile' | 'removeDir'>;

export abstract class ProtocolStore<H> {
  protected readonly tree: TreeWalker<H>;

  protected constructor(
    readonly server: string,
    readonly share: string,
    protected readonly st: StatusKinds,
    io: TreeIo<H>,
  ) {
    this.tree = new TreeWalker<H>({
      ...io,
      isMissing: (e) => st.missing(e),
      isBadCookie: (e) => st.badCookie(e),
      isNotEmpty: (e) => st.notEmpty(e),
      describe: (segs) => this.describe(segs),
      where: (segs) => this.where(segs),
    });
  }

  /** The server path of segments below the share. */
  protected where(segs: readonly string[]): string {
    return sharePath(this.share, segs);
  }

  /** `server:/share/path`, for messages. */
  protected describe(segs: readonly string[]): string {
    return `${this.server}:${this.where(segs)}`;
  }

  /** PathFacts.below, when asked for and the path is an existing directory (handle `dir`). */
  protected async walkBelow(f: PathFacts, segs: string[], dir: H, o: InspectOptions): Promise<void> {
    const last = f.steps.at(-1);
    if (o.walkLimit === undefined || !segs.length || f.steps.length !== segs.length || last?.type !== 'dir') return;
    f.below = await this.tree.scan(dir, segs, { ...o, fsid: f.share.fsid, limit: o.walkLimit });
  }

  /** The path (or a parent) is gone or not a directory: nothing there. */
  protected absent(e: unknown): boolean {
    return this.st.missing(e) || this.st.notDir(e);
  }

  /** NOENT becomes NotFound naming the path; anything else is rethrown. */
  protected notFound(e: unknown, segs: readonly string[]): never {
    if (this.st.missing(e)) throw new NotFound(`${this.describe(segs)} does not exist`);
    throw e;
  }

  /** What an RMDIR that threw means: gone already, or something is (still) in it. */
  protected rmdirOutcome(e: unknown): RmdirResult {
    if (this.st.missing(e)) return 'missing';
    if (this.st.notEmpty(e) || this.st.notDir(e)) return 'not-empty';
    throw e;
  }

  /**
   * The rename rules both protocols follow: `from` must exist (NotFound), the parents of `to`
   * are made, `to` must not exist (AlreadyExists) — RENAME would replace an empty directory
   * there; this check leaves only a race with another writer, never a silent overwrite.
   */
  async rename(permit: Permit, o: OpOptions = {}): Promise<void> {
    // A rename never crosses file systems (the server answers XDEV); the gate checked both paths.
    const { segs: fs, to: ts, fsid } = admitted(permit, 'rename');
    await this.renameSteps(fs, ts, { ...o, fsid }, (steps) => this.checkedRename(fs, ts, steps));
  }

  /** Hands `run` this protocol's steps for renaming `fs` to `ts` (inside whatever they need). */
  protected abstract renameSteps(
    fs: string[],
    ts: string[],
    o: OpOptions & { fsid: string },
    run: <F, T>(steps: RenameSteps<F, T>) => Promise<void>,
  ): Promise<void>;

  private async checkedRename<F, T>(fs: string[], ts: string[], io: RenameSteps<F, T>): Promise<void> {
    let source: F;
    try {
      source = await io.source();
    } catch (e) {
      this.notFound(e, fs);
    }
    const parents = await io.parents();
    try {
      await io.probe(parents);
    } catch (e) {
      if (!this.st.missing(e)) throw e;
      return io.rename(source, parents);
    }
    throw new AlreadyExists(`${this.describe(ts)} already exists`);
  }
}

/** A rename in one protocol's calls; `F` is what `from` resolved to, `T` the parents of `to`. */
export interface RenameSteps<F, T> {
  /** Resolves `from` (throws NOENT when it is gone). */
  source(): Promise<F>;
  /** Makes the parents of `to` and resolves them. */
  parents(): Promise<T>;
  /** Resolves when `to` exists (throws NOENT when it does not). */
  probe(parents: T): Promise<unknown>;
  rename(source: F, parents: T): Promise<void>;
}

/** The attributes of `want` that `have` does not match yet (empty: nothing to set). */
export function attrsToChange(have: NfsStat, want: DirAttrs): DirAttrs {
  const out: DirAttrs = {};
  if (want.mode !== undefined && have.mode !== want.mode) out.mode = want.mode;
  if (want.uid !== undefined && have.uid !== want.uid) out.uid = want.uid;
  if (want.gid !== undefined && have.gid !== want.gid) out.gid = want.gid;
  return out;
}

/** One server's health from an NFS NULL call. */
export async function nullHealth(server: string, ping: () => Promise<unknown>): Promise<BackendHealth> {
  try {
    await ping();
    return { kind: 'nfs', backend: server, up: true };
  } catch (e) {
    return { kind: 'nfs', backend: server, up: false, error: (e as Error).message };
  }
}
