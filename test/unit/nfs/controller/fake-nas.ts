// An in-memory NAS for the ownership property test: one namespace per server, as an NFSv4
// client sees it (a read-only pseudo-filesystem on top, exports with their own fsid below it,
// nested exports, symlinks), and the protocol half of a store over it (RawNfsStore). It behaves
// like a server, not like our stores: LOOKUP crosses into exports, MKDIR and RENAME work anywhere
// writable, nothing checks fsids. The real ownership gate wraps it and the real tree walker
// deletes with it, so whatever the gate lets through is done to the tree.
import { AlreadyExists, CsiError, FailedPrecondition, NotFound } from '../../../../src/errors.js';
import type { BackendHealth } from '../../../../src/csi/health.js';
import { admitted, boundaryError, gated } from '../../../../src/nfs/controller/store/ownership.js';
import { type CopyStats, emptyStats } from '../../../../src/nfs/controller/copy/copy-tree.js';
import { TreeWalker } from '../../../../src/nfs/controller/store/tree-walk.js';
import type {
  DirAttrs,
  FileType,
  FsStat,
  InspectOptions,
  NfsDirEntry,
  NfsStat,
  NfsStore,
  NfsStores,
  OpOptions,
  PathFacts,
  Permit,
  RawNfsStore,
  RmdirResult,
} from '../../../../src/nfs/controller/store/store.js';
import { pathSegments } from '../../../../src/nfs/controller/store/store.js';

export interface FNode {
  id: number;
  type: 'dir' | 'file' | 'symlink';
  fsid: string;
  /** A node of the pseudo-filesystem: read-only, not inside an export. */
  pseudo: boolean;
  /** An export's root that the server reports as a junction (mounted_on_fileid != fileid). */
  exportRoot: boolean;
  /** Any export's root (what MOUNT EXPORT lists). */
  isExport: boolean;
  /**
   * The fsid NFSv3 reports: v3 LOOKUP never crosses into an export, so a nested export on the
   * same disk shows its parent's (ganesha does so).
   */
  v3fsid: string;
  children: Map<string, FNode>;
  /** mtime and ctime the server reports, when set (touch); none otherwise. */
  changedMs?: number;
}

/** A protocol status, as the stores see one. */
class FakeStatus extends CsiError {
  constructor(
    readonly status: 'NOENT' | 'NOTEMPTY' | 'ROFS' | 'XDEV' | 'NOTDIR' | 'SYMLINK',
    what: string,
  ) {
    super(status === 'NOENT' ? 'NotFound' : 'FailedPrecondition', `${what}: NFS4ERR_${status}`);
  }
}
const is = (e: unknown, s: FakeStatus['status']) => e instanceof FakeStatus && e.status === s;

export class FakeNas {
  private nextId = 1;
  readonly root: FNode;

  /**
   * `speaks`: the version the controller uses (a v3+v4 server after a fall back speaks v4).
   * `pseudoFsid`: what the pseudo-filesystem reports (ganesha: its own; Linux: the export's).
   */
  constructor(
    readonly protocols: '3' | '4' | '3,4',
    readonly speaks: '3' | '4' = protocols === '4' ? '4' : '3',
    pseudoFsid = 'pseudo',
  ) {
    this.root = this.node('dir', pseudoFsid, true);
  }

  private node(type: FNode['type'], fsid: string, pseudo = false): FNode {
    return {
      id: this.nextId++,
      type,
      fsid,
      v3fsid: fsid,
      pseudo,
      exportRoot: false,
      isExport: false,
      children: new Map(),
    };
  }

  /** Follows names only (a symlink is never followed); undefined when something is missing. */
  find(abs: string): FNode | undefined {
    let n: FNode | undefined = this.root;
    for (const s of abs.split('/').filter(Boolean)) n = n?.type === 'dir' ? n.children.get(s) : undefined;
    return n;
  }

  /**
   * Makes `abs` (and pseudo parents above the first export) an export root with `fsid`;
   * `junction`: the server reports one there (mounted_on_fileid != fileid). ganesha 4.3 does for
   * an export below its pseudo-filesystem, not for an export inside another export (there only
   * its Filesystem_id tells, in LOOKUP and READDIR alike): the default.
   */
  addExport(abs: string, fsid: string, junction?: boolean): void {
    let n = this.root;
    const parts = abs.split('/').filter(Boolean);
    parts.forEach((s, i) => {
      let c = n.children.get(s);
      const last = i === parts.length - 1;
      if (!c) n.children.set(s, (c = this.node('dir', last ? fsid : n.fsid, !last && n.pseudo)));
      if (last) {
        const v3fsid = n.pseudo ? fsid : n.v3fsid; // inside another export: the same disk
        Object.assign(c, { fsid, v3fsid, pseudo: false, exportRoot: junction ?? n.pseudo, isExport: true });
      }
      n = c;
    });
  }

  /**
   * A directory inside an export on which another disk is mounted and not exported by itself
   * (Linux nfsd with crossmnt): both versions report its fsid, NFSv4 a junction; no export list
   * names it.
   */
  mount(abs: string, fsid: string): void {
    this.put(abs, 'dir');
    const n = this.find(abs);
    if (n) Object.assign(n, { fsid, v3fsid: fsid, exportRoot: true });
  }

  /** Puts a directory, file or symlink inside an export (parents made on the same fs). */
  put(abs: string, type: FNode['type'] = 'dir'): void {
    let n = this.root;
    const parts = abs.split('/').filter(Boolean);
    parts.forEach((s, i) => {
      let c = n.children.get(s);
      if (!c) {
        c = this.node(i === parts.length - 1 ? type : 'dir', n.fsid, n.pseudo);
        c.v3fsid = n.v3fsid;
        n.children.set(s, c);
      }
      n = c;
    });
  }

  /** Sets what the server reports as the node's mtime and ctime. */
  touch(abs: string, ms: number): void {
    const n = this.find(abs);
    if (!n) throw new Error(`touch: no ${abs}`);
    n.changedMs = ms;
  }

  /** Every node but the root: id -> path, type, fsid. */
  picture(): Map<number, { path: string; type: FNode['type']; fsid: string; children: number }> {
    const out = new Map<number, { path: string; type: FNode['type']; fsid: string; children: number }>();
    const walk = (n: FNode, p: string) => {
      for (const [name, c] of n.children) {
        const cp = `${p}/${name}`;
        out.set(c.id, { path: cp, type: c.type, fsid: c.fsid, children: c.children.size });
        walk(c, cp);
      }
    };
    walk(this.root, '');
    return out;
  }

  /** A file or symlink made in `parent` (a copy's), on its file system. */
  fileIn(parent: FNode, name: string, type: 'file' | 'symlink', what: string): FNode {
    if (parent.pseudo) throw new FakeStatus('ROFS', what);
    const c = this.node(type, parent.fsid);
    c.v3fsid = parent.v3fsid;
    parent.children.set(name, c);
    return c;
  }

  mkdirIn(parent: FNode, name: string, what: string): FNode {
    if (parent.pseudo) throw new FakeStatus('ROFS', what);
    const c = this.node('dir', parent.fsid);
    c.v3fsid = parent.v3fsid;
    parent.children.set(name, c);
    return c;
  }
}

/** The protocol half of a store over the fake NAS, speaking `v`. */
class FakeRaw implements RawNfsStore {
  private readonly tree: TreeWalker<FNode>;
  constructor(
    private readonly nas: FakeNas,
    readonly server: string,
    readonly share: string,
    private readonly v: '3' | '4',
  ) {
    this.tree = new TreeWalker<FNode>({
      // Pages of two entries, so cookies are used.
      readdir: async (dir, cookie) => {
        const all = [...dir.children].map(([name, c], i) => ({
          name,
          cookie: BigInt(i + 1),
          type: c.type,
          fsid: this.fsid(c),
          junction: this.junction(c),
        }));
        const page = all.slice(Number(cookie), Number(cookie) + 2);
        return { entries: page, eof: Number(cookie) + 2 >= all.length, cookieverf: Buffer.alloc(8) };
      },
      lookup: async (dir, name, path) => {
        const c = dir.children.get(name);
        if (!c) throw new FakeStatus('NOENT', path);
        return { handle: c, type: c.type as FileType, fsid: this.fsid(c), junction: this.junction(c) };
      },
      removeFile: async (dir, name, path) => this.unlink(dir, name, path),
      removeDir: async (dir, name, path) => this.unlink(dir, name, path),
      isMissing: (e) => is(e, 'NOENT'),
      isBadCookie: () => false,
      isNotEmpty: (e) => is(e, 'NOTEMPTY'),
      describe: (segs) => `${server}:${share}/${segs.join('/')}`,
      where: (segs) => `${share}/${segs.join('/')}`,
    });
  }

  private fsid(n: FNode): string {
    return this.v === '3' ? n.v3fsid : n.fsid;
  }

  /** NFSv4 reports junctions (mounted_on_fileid); NFSv3 has no such attribute. */
  private junction(n: FNode): boolean {
    return this.v === '4' && n.exportRoot;
  }

  private unlink(dir: FNode, name: string, path: string): void {
    const c = dir.children.get(name);
    if (!c) throw new FakeStatus('NOENT', path);
    if (dir.pseudo) throw new FakeStatus('ROFS', path);
    if (c.children.size) throw new FakeStatus('NOTEMPTY', path);
    dir.children.delete(name);
  }

  /** The share's node: v3 MOUNT hands out only directories inside an export; v4 LOOKUPs from the root. */
  private shareNode(): FNode {
    let n = this.nas.root;
    for (const s of this.share.split('/').filter(Boolean)) {
      if (n.type === 'symlink') throw new FakeStatus('SYMLINK', this.share);
      const c = n.children.get(s);
      if (!c) throw new FailedPrecondition(`no directory ${this.share}`);
      n = c;
    }
    if (n.type === 'symlink') throw new FakeStatus('SYMLINK', this.share);
    if (this.v === '3' && (n.pseudo || n.type !== 'dir'))
      throw new FailedPrecondition(`refused to mount ${this.share}`);
    return n;
  }

  /** Walks `segs` below the share; v4 answers SYMLINK for a step through a link, v3 NOTDIR. */
  private walk(segs: readonly string[]): { parent: FNode; node: FNode | undefined; name: string } {
    let parent = this.shareNode();
    let node: FNode | undefined = parent;
    segs.forEach((s, i) => {
      if (!node) throw new FakeStatus('NOENT', segs.slice(0, i).join('/'));
      if (node.type === 'symlink') throw new FakeStatus(this.v === '4' ? 'SYMLINK' : 'NOTDIR', s);
      if (node.type !== 'dir') throw new FakeStatus('NOTDIR', s);
      parent = node;
      node = node.children.get(s);
    });
    return { parent, node, name: segs.at(-1) ?? '' };
  }

  async inspect(path: string, o: InspectOptions = {}): Promise<PathFacts> {
    const share = this.shareNode();
    const facts: PathFacts = { share: { fsid: this.fsid(share), writable: !share.pseudo }, steps: [] };
    if (this.v === '3') facts.exportsBelow = this.exportsBelow(share, '');
    let n = share;
    for (const name of pathSegments(path, true)) {
      const c = n.children.get(name);
      if (!c) break;
      facts.steps.push({ name, type: c.type, fsid: this.fsid(c), junction: this.junction(c) });
      if (c.type !== 'dir') break;
      n = c;
    }
    const segs = pathSegments(path, true);
    if (
      o.walkLimit !== undefined &&
      segs.length &&
      facts.steps.length === segs.length &&
      facts.steps.at(-1)?.type === 'dir'
    ) {
      facts.below = await this.tree.scan(n, segs, { ...o, fsid: facts.share.fsid, limit: o.walkLimit });
    }
    return facts;
  }

  private exportsBelow(n: FNode, prefix: string): string[] {
    return [...n.children].flatMap(([name, c]) => {
      const p = prefix ? `${prefix}/${name}` : name;
      return [...(c.isExport ? [p] : []), ...(c.type === 'dir' ? this.exportsBelow(c, p) : [])];
    });
  }

  async stat(path: string): Promise<NfsStat | null> {
    try {
      const { node } = this.walk(pathSegments(path, true));
      if (!node) return null;
      const times = node.changedMs !== undefined ? { mtimeMs: node.changedMs, ctimeMs: node.changedMs } : {};
      return { type: node.type, mode: 0o755, uid: 0, gid: 0, ...times };
    } catch (e) {
      if (is(e, 'NOENT') || is(e, 'NOTDIR')) return null;
      throw e;
    }
  }

  async list(path: string): Promise<NfsDirEntry[]> {
    const { node } = this.walk(pathSegments(path, true));
    if (!node) throw new NotFound(path);
    return [...node.children].map(([name, c]) => ({ name, type: c.type }));
  }

  async statfs(): Promise<FsStat> {
    return { totalBytes: 1, freeBytes: 1, availBytes: 1, totalFiles: 1, freeFiles: 1, availFiles: 1 };
  }

  private mkdirs(segs: readonly string[], what: string): FNode {
    let n = this.shareNode();
    for (const s of segs) {
      if (n.type !== 'dir') throw new FakeStatus(n.type === 'symlink' && this.v === '4' ? 'SYMLINK' : 'NOTDIR', what);
      n = n.children.get(s) ?? this.nas.mkdirIn(n, s, what);
    }
    if (n.type !== 'dir') throw new FailedPrecondition(`${what} exists and is a ${n.type}, not a directory`);
    return n;
  }

  async ensureDir(permit: Permit, _attrs: DirAttrs): Promise<NfsStat> {
    const { segs } = admitted(permit, 'create');
    this.mkdirs(segs, permit.path);
    return { type: 'dir', mode: 0o755, uid: 0, gid: 0 };
  }

  async removeTree(permit: Permit, o: OpOptions = {}): Promise<boolean> {
    const { segs, fsid } = admitted(permit, 'delete');
    let w;
    try {
      w = this.walk(segs);
    } catch (e) {
      if (is(e, 'NOENT') || is(e, 'NOTDIR')) return false;
      throw e;
    }
    if (!w.node) return false;
    const target = { handle: w.node, type: w.node.type as FileType, fsid: this.fsid(w.node) };
    await this.tree.removeTree(w.parent, w.name, target, segs, { ...o, fsid });
    return true;
  }

  async removeDirIfEmpty(permit: Permit): Promise<RmdirResult> {
    const { segs } = admitted(permit, 'rmdir');
    const { parent, node, name } = this.walk(segs);
    if (!node) return 'missing';
    if (node.type !== 'dir' || node.children.size) return 'not-empty';
    this.unlink(parent, name, permit.path);
    return 'removed';
  }

  async rename(permit: Permit): Promise<void> {
    const { segs, to } = admitted(permit, 'rename');
    const src = this.walk(segs);
    if (!src.node) throw new NotFound(`${permit.path} does not exist`);
    const toParent = this.mkdirs(to.slice(0, -1), permit.to ?? '');
    const toName = to.at(-1) ?? '';
    if (toParent.children.has(toName)) throw new AlreadyExists(`${permit.to ?? ''} already exists`);
    if (toParent.v3fsid !== src.parent.v3fsid) throw new FakeStatus('XDEV', permit.path);
    if (src.parent.pseudo || toParent.pseudo) throw new FakeStatus('ROFS', permit.path);
    src.parent.children.delete(src.name);
    toParent.children.set(toName, src.node);
  }

  /**
   * The tree copy as the NFSv3 copy does it (copy-tree.ts): `to` and its parents made, every
   * entry copied, a link as a link (never followed), and a stop at an entry of another file system.
   */
  async copyTree(permit: Permit): Promise<CopyStats> {
    const { segs, to, fsid } = admitted(permit, 'copy');
    const src = this.walk(segs);
    if (src.node?.type !== 'dir') throw new NotFound(`${permit.path} is not a directory`);
    const parent = this.mkdirs(to.slice(0, -1), permit.to ?? '');
    const name = to.at(-1) ?? '';
    if (parent.children.has(name)) throw new AlreadyExists(`${permit.to ?? ''} already exists`);
    const stats = emptyStats();
    const copy = (from: FNode, into: FNode, n: string, where: string) => {
      if (this.fsid(from) !== fsid || this.junction(from)) throw boundaryError(where);
      const c = from.type === 'dir' ? this.nas.mkdirIn(into, n, where) : this.nas.fileIn(into, n, from.type, where);
      if (from.type === 'dir') {
        stats.dirs++;
        for (const [k, child] of from.children) copy(child, c, k, `${where}/${k}`);
      } else if (from.type === 'file') stats.files++;
      else stats.symlinks++;
    };
    copy(src.node, parent, name, permit.path);
    return stats;
  }

  /** The fake NAS models names and file systems, not contents: it does not unpack archives. */
  unpackArchive(permit: Permit): Promise<never> {
    admitted(permit, 'unpack');
    return Promise.reject(new FailedPrecondition('the fake NAS does not unpack archives'));
  }
}

/** NfsStores over fake NASes, each in the version it `speaks`. */
export class FakeNasStores implements NfsStores {
  constructor(private readonly nases: Map<string, FakeNas>) {}
  open(server: string, share: string): NfsStore {
    const nas = this.nases.get(server);
    if (!nas) throw new FailedPrecondition(`no NFS server ${server}`);
    return gated(new FakeRaw(nas, server, share, nas.speaks));
  }
  async ping(): Promise<void> {}
  async health(): Promise<BackendHealth[]> {
    return [];
  }
  servers(): string[] {
    return [...this.nases.keys()];
  }
  async close(): Promise<void> {}
}
