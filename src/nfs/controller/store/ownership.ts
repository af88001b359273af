// The NFS driver's ownership gate: the one place that decides, from facts the server gives at
// decision time, whether a create, delete, rmdir, rename, copy or unpack may touch a path (a copy
// reads its source directory, an unpack its archive file, and both create their target). A change acts on
// exactly one claim directory strictly below the share (and its archive target), never on the
// share or above it, never across a file system or export boundary (the NFSv4 pseudo-filesystem
// included: a share that is not inside an export is refused before anything below it is read),
// never through or on a symlink. The protocol stores change nothing without a permit, and only
// this module makes permits and wraps a protocol store into the NfsStore everything else uses.
import { type CsiError, FailedPrecondition, Internal, NotFound } from '../../../errors.js';
import {
  type NfsStore,
  type OpOptions,
  type PathFacts,
  type PathStep,
  type Permit,
  type RawNfsStore,
  pathSegments,
  sharePath,
} from './store.js';

const issued = new WeakSet<Permit>();

/** The permit a protocol store was handed, checked: made here, for this change. */
export function admitted(p: Permit, op: Permit['op']): { segs: string[]; to: string[]; fsid: string } {
  if (!issued.has(p) || p.op !== op) {
    throw new Internal(`NFS ${op} of ${p.path} without a permit of the ownership gate`);
  }
  return { segs: pathSegments(p.path), to: p.to === undefined ? [] : pathSegments(p.to), fsid: p.fsid };
}

/** The error for a directory of another file system met below the share (a walk or a step). */
export function boundaryError(where: string): CsiError {
  return new FailedPrecondition(
    `${where} is on another file system or export than the share; the driver never deletes, ` +
      'archives or creates across a file system boundary: point share at the export that holds the claim',
  );
}

const link = (where: string) =>
  new FailedPrecondition(
    `${where} is a symbolic link; the driver never follows links and never deletes or archives one: ` +
      'name the real directory in share and subDir',
  );

type Say = (segs: readonly string[]) => string;

/** The first fact that forbids acting below the share at all. */
function refuseShare(raw: RawNfsStore, f: PathFacts, say: Say): void {
  if (f.share.writable) return;
  const into = f.steps.findIndex((s) => s.fsid !== f.share.fsid || s.junction);
  const hint =
    into >= 0
      ? `; the export begins at ${sharePath(
          raw.share,
          f.steps.slice(0, into + 1).map((s) => s.name),
        )}: use that as share`
      : '';
  throw new FailedPrecondition(
    `${say([])} is not inside an NFS export (a read-only NFSv4 pseudo-filesystem node, or a share this ` +
      `client may not change); nothing below it is deleted, archived or created${hint}`,
  );
}

/** Refuses a symlink, or a step onto another file system, among the existing steps. */
function refuseSteps(f: PathFacts, say: Say, wanted: number): void {
  f.steps.forEach((s: PathStep, i) => {
    const here = f.steps.slice(0, i + 1).map((x) => x.name);
    if (s.type === 'symlink') throw link(say(here));
    if (s.fsid !== f.share.fsid || s.junction) throw boundaryError(say(here));
    if (s.type !== 'dir' && i < wanted - 1) {
      throw new FailedPrecondition(`${say(here)} is a ${s.type}, not a directory`);
    }
  });
}

/** Refuses a path that is another export, lies in one, or (but for a create) holds one. */
function refuseExports(f: PathFacts, segs: readonly string[], op: Permit['op'], say: Say): void {
  const path = segs.join('/');
  for (const e of f.exportsBelow ?? []) {
    if (path === e || path.startsWith(e + '/')) throw boundaryError(say(e.split('/')));
    if (op !== 'create' && e.startsWith(path + '/')) {
      throw new FailedPrecondition(
        `${say(segs)} holds another NFS export (${say(e.split('/'))}); the driver never deletes or archives ` +
          'across an export boundary',
      );
    }
  }
}

/**
 * How many entries the gate reads below a claim before it archives or deletes it. A walk that
 * meets no boundary within them proves nothing about the rest: an archive past it is refused,
 * a delete goes on with the tree walk's own check of every entry before it is removed.
 */
export const SCAN_LIMIT = 100_000;

/**
 * Refuses to archive or delete a claim that holds another file system or export anywhere below
 * it (an NFSv4 client sees a nested export only by walking: READDIR reports its fsid, ganesha
 * reports no junction for it, and there is no export list), or — for an archive, which a
 * boundary past the limit would follow — one too large to walk.
 */
function refuseInside(f: PathFacts, op: Permit['op'], segs: string[], say: Say): void {
  const inside = f.below;
  if (!inside) throw new Internal(`no walk below ${say(segs)} before a ${op}`);
  if (inside.boundary) {
    throw new FailedPrecondition(
      `${say(segs)} holds ${say(inside.boundary)}, on another file system or export than the share; the driver ` +
        'never deletes or archives across a file system boundary: unexport or unmount it, or move it out first',
    );
  }
  if (op === 'rename' && !inside.complete) {
    throw new FailedPrecondition(
      `${say(segs)} holds more than ${SCAN_LIMIT} entries: the driver archives only a claim it has walked in full ` +
        'and found no other file system or export in, and refuses rather than guess; move it on the NAS by hand ' +
        '(or set onDelete: retain), then delete the PV',
    );
  }
}

/** The decision for one change: a permit, or why there is nothing to do. */
async function decide(
  raw: RawNfsStore,
  op: Permit['op'],
  path: string,
  o: OpOptions,
  to?: string,
): Promise<Permit | 'missing' | 'not-dir'> {
  const segs = pathSegments(path); // the share root itself is never changed
  const say: Say = (s) => `${raw.server}:${sharePath(raw.share, s)}`;
  const walks = op === 'rename' || op === 'delete';
  const f = await raw.inspect(path, walks ? { ...o, walkLimit: SCAN_LIMIT } : o);
  refuseShare(raw, f, say);
  refuseSteps(f, say, segs.length);
  refuseExports(f, segs, op, say);
  const exists = f.steps.length === segs.length;
  const last = f.steps.at(-1);
  if (op === 'unpack' && exists && last?.type !== 'file') {
    throw new FailedPrecondition(`${say(segs)} is a ${last?.type ?? 'file'}, not an archive file; it is left alone`);
  }
  if (op !== 'create' && op !== 'unpack' && exists && last?.type !== 'dir') {
    if (op === 'rmdir') return 'not-dir'; // a parent that is not a directory is left alone
    throw new FailedPrecondition(`${say(segs)} is a ${last?.type ?? 'file'}, not a claim directory; it is left alone`);
  }
  if (op === 'rename' || op === 'copy' || op === 'unpack') {
    if (!exists) throw new NotFound(`${say(segs)} does not exist`);
    if (to === undefined) throw new Internal(`${op} without a target`);
    const ts = pathSegments(to);
    if (ts.slice(0, segs.length).join('/') === path || segs.slice(0, ts.length).join('/') === to) {
      throw new FailedPrecondition(`refusing to ${op} ${say(segs)} into or onto itself (${to})`);
    }
    const t = await raw.inspect(to, o);
    refuseSteps({ share: f.share, steps: t.steps.slice(0, ts.length - 1) }, say, ts.length);
    refuseExports(f, ts, 'create', say);
  } else if (op !== 'create' && !exists) {
    return 'missing';
  }
  if (op === 'rename' || op === 'delete') refuseInside(f, op, segs, say);
  const p: Permit = { op, path, to, fsid: f.share.fsid };
  issued.add(p);
  return p;
}

function permitted(p: Permit | 'missing' | 'not-dir'): Permit {
  if (typeof p === 'string') throw new Internal(`the ownership gate answered ${p} where it decides or refuses`);
  return p;
}

/** The NfsStore over a protocol store: every change goes through `decide` first. */
export function gated(raw: RawNfsStore): NfsStore {
  return {
    server: raw.server,
    share: raw.share,
    stat: (p, o) => raw.stat(p, o),
    list: (p, o) => raw.list(p, o),
    statfs: (o) => raw.statfs(o),
    ensureDir: async (path, attrs, o = {}) => raw.ensureDir(permitted(await decide(raw, 'create', path, o)), attrs, o),
    removeTree: async (path, o = {}) => {
      const p = await decide(raw, 'delete', path, o);
      return typeof p === 'string' ? false : raw.removeTree(p, o);
    },
    removeDirIfEmpty: async (path, o = {}) => {
      const p = await decide(raw, 'rmdir', path, o);
      if (typeof p !== 'string') return raw.removeDirIfEmpty(p, o);
      return p === 'missing' ? 'missing' : 'not-empty';
    },
    rename: async (from, to, o = {}) => raw.rename(permitted(await decide(raw, 'rename', from, o, to)), o),
    copyTree: async (from, to, o = {}) => raw.copyTree(permitted(await decide(raw, 'copy', from, o, to)), o),
    unpackArchive: async (archive, to, o = {}) =>
      raw.unpackArchive(permitted(await decide(raw, 'unpack', archive, o, to)), o),
  };
}
