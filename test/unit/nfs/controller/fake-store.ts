// In-memory NfsStores with the semantics the port documents, for controller unit tests.
// Each server is one tree; a share is a path in it. `calls` records operations, `failWith`
// makes the next call of an operation throw.
import { type CopyStats, emptyStats } from '../../../../src/nfs/controller/copy/copy-tree.js';
import type { BackendHealth } from '../../../../src/csi/health.js';
import { AlreadyExists, FailedPrecondition, InvalidArgument, NotFound } from '../../../../src/errors.js';
import type {
  CopyTreeOptions,
  DirAttrs,
  FsStat,
  NfsDirEntry,
  NfsStat,
  NfsStore,
  NfsStores,
  RmdirResult,
} from '../../../../src/nfs/controller/store/store.js';

interface Node {
  type: 'dir' | 'file' | 'symlink';
  mode: number;
  uid: number;
  gid: number;
  children: Map<string, Node>;
}

const dir = (mode = 0o755): Node => ({ type: 'dir', mode, uid: 0, gid: 0, children: new Map() });

function segs(p: string): string[] {
  const s = p === '' ? [] : p.split('/');
  if (s.some((x) => x === '' || x === '.' || x === '..')) throw new InvalidArgument(`bad path ${p}`);
  return s;
}

export class FakeStores implements NfsStores {
  readonly trees = new Map<string, Node>();
  readonly calls: string[] = [];
  private readonly failures = new Map<string, Error>();
  down = false;
  /** Called inside every copyTree, after its progress report: what a running copy looks like. */
  onCopy: (() => void) | undefined;

  tree(server: string): Node {
    let t = this.trees.get(server);
    if (!t) this.trees.set(server, (t = dir()));
    return t;
  }

  /** Node at an absolute path on a server, or undefined. */
  get(server: string, abs: string): Node | undefined {
    let n: Node | undefined = this.tree(server);
    for (const s of abs.split('/').filter(Boolean)) n = n?.children.get(s);
    return n;
  }

  /** Creates directories (and optionally a file at the end) directly, as another client would. */
  put(server: string, abs: string, type: 'dir' | 'file' = 'dir'): void {
    const parts = abs.split('/').filter(Boolean);
    let n = this.tree(server);
    parts.forEach((s, i) => {
      let c = n.children.get(s);
      if (!c)
        n.children.set(s, (c = i === parts.length - 1 && type === 'file' ? { ...dir(0o644), type: 'file' } : dir()));
      n = c;
    });
  }

  failWith(op: string, e: Error): void {
    this.failures.set(op, e);
  }

  open(server: string, share: string): NfsStore {
    return new FakeStore(this, server, share);
  }

  async ping(): Promise<void> {
    this.calls.push('ping');
    if (this.down) throw new Error('server down');
  }

  async health(): Promise<BackendHealth[]> {
    return this.servers().map((backend) => ({
      kind: 'nfs',
      backend,
      up: !this.down,
      ...(this.down && { error: 'server down' }),
    }));
  }

  servers(): string[] {
    return [...this.trees.keys()];
  }

  async close(): Promise<void> {}

  enter(op: string, desc: string): void {
    this.calls.push(`${op} ${desc}`);
    const f = this.failures.get(op);
    if (f) {
      this.failures.delete(op);
      throw f;
    }
  }
}

class FakeStore implements NfsStore {
  constructor(
    private readonly f: FakeStores,
    readonly server: string,
    readonly share: string,
  ) {}

  private root(): Node {
    const n = this.f.get(this.server, this.share);
    if (!n) throw new NotFound(`share ${this.share} not exported`);
    return n;
  }

  private find(p: string): { parent: Node | undefined; node: Node | undefined; name: string } {
    const s = segs(p);
    let parent: Node | undefined;
    let node: Node | undefined = this.root();
    for (const x of s) {
      parent = node;
      node = node?.type === 'dir' ? node.children.get(x) : undefined;
    }
    return { parent, node, name: s[s.length - 1] ?? '' };
  }

  async ensureDir(path: string, attrs: DirAttrs): Promise<NfsStat> {
    this.f.enter('ensureDir', path);
    let n = this.root();
    const s = segs(path);
    if (!s.length) throw new InvalidArgument('root');
    s.forEach((x, i) => {
      let c = n.children.get(x);
      const last = i === s.length - 1;
      if (!c) n.children.set(x, (c = dir(last ? (attrs.mode ?? 0o755) : 0o755)));
      if (c.type !== 'dir') throw new FailedPrecondition(`${x} is not a directory`);
      n = c;
    });
    if (attrs.mode !== undefined) n.mode = attrs.mode;
    if (attrs.uid !== undefined) n.uid = attrs.uid;
    if (attrs.gid !== undefined) n.gid = attrs.gid;
    return { type: 'dir', mode: n.mode, uid: n.uid, gid: n.gid };
  }

  async stat(path: string): Promise<NfsStat | null> {
    this.f.enter('stat', path);
    const { node } = this.find(path);
    return node ? { type: node.type, mode: node.mode, uid: node.uid, gid: node.gid } : null;
  }

  async list(path: string): Promise<NfsDirEntry[]> {
    this.f.enter('list', path);
    const { node } = this.find(path);
    if (!node) throw new NotFound(path);
    return [...node.children].map(([name, c]) => ({ name, type: c.type }));
  }

  async removeTree(path: string): Promise<boolean> {
    this.f.enter('removeTree', path);
    if (!segs(path).length) throw new InvalidArgument('root');
    const { parent, node, name } = this.find(path);
    if (!node || !parent) return false;
    parent.children.delete(name);
    return true;
  }

  async removeDirIfEmpty(path: string): Promise<RmdirResult> {
    this.f.enter('removeDirIfEmpty', path);
    if (!segs(path).length) throw new InvalidArgument('root');
    const { parent, node, name } = this.find(path);
    if (!node || !parent) return 'missing';
    if (node.type !== 'dir' || node.children.size) return 'not-empty';
    parent.children.delete(name);
    return 'removed';
  }

  async rename(from: string, to: string): Promise<void> {
    this.f.enter('rename', `${from} -> ${to}`);
    const src = this.find(from);
    if (!src.node || !src.parent) throw new NotFound(from);
    const ts = segs(to);
    if (ts.length > 1) await this.ensureDir(ts.slice(0, -1).join('/'), {});
    const dst = this.find(to);
    if (dst.node) throw new AlreadyExists(to);
    src.parent.children.delete(src.name);
    if (!dst.parent) throw new NotFound(to);
    dst.parent.children.set(dst.name, src.node);
  }

  /** A deep copy of the tree (the real copy's fidelity is tested against ganesha). */
  async copyTree(from: string, to: string, o?: CopyTreeOptions): Promise<CopyStats> {
    this.f.enter('copyTree', `${from} -> ${to}`);
    const src = this.find(from).node;
    if (!src || src.type !== 'dir') throw new NotFound(from);
    const ts = segs(to);
    if (ts.length > 1) await this.ensureDir(ts.slice(0, -1).join('/'), {});
    const dst = this.find(to);
    if (dst.node) throw new AlreadyExists(to);
    if (!dst.parent) throw new NotFound(to);
    const stats = emptyStats();
    const clone = (n: Node): Node => {
      stats[n.type === 'dir' ? 'dirs' : n.type === 'file' ? 'files' : 'symlinks']++;
      return { ...n, children: new Map([...n.children].map(([k, c]) => [k, clone(c)])) };
    };
    dst.parent.children.set(dst.name, clone(src));
    o?.progress?.(stats);
    this.f.onCopy?.();
    return stats;
  }

  /** The target made empty: the unpack's fidelity is tested against ganesha. */
  async unpackArchive(from: string, to: string): Promise<CopyStats> {
    this.f.enter('unpackArchive', `${from} -> ${to}`);
    const src = this.find(from).node;
    if (!src || src.type !== 'file') throw new NotFound(from);
    if (this.find(to).node) throw new AlreadyExists(to);
    await this.ensureDir(to, {});
    return { ...emptyStats(), dirs: 1 };
  }

  async statfs(): Promise<FsStat> {
    this.f.enter('statfs', '');
    return { totalBytes: 1e12, freeBytes: 5e11, availBytes: 5e11, totalFiles: 1e6, freeFiles: 5e5, availFiles: 5e5 };
  }
}
