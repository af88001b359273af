// The snapshot RPCs of nfs.csi.k8s.io and CreateVolume's content sources (restore from a
// snapshot, ours or csi-driver-nfs's, and clone of a volume), over snapshots.ts.
import type { Logger } from 'pino';
import type { CallContext } from '../../../csi/types.js';
import type * as T from '../../../csi/types.js';
import { Busy, FailedPrecondition, InvalidArgument, NotFound } from '../../../errors.js';
import { parseVolumeId } from '../../volume-id.js';
import { claimRef } from './claim-ref.js';
import { type UpstreamSnapshotRef, parseSnapshotId } from '../../snapshot-id.js';
import type { NfsStore, NfsStores, OpOptions } from '../store/store.js';
import { type CopyProgress, trackedCopy } from '../copy/copy-progress.js';
import { fillIntoPlace } from '../snapshots/fill-records.js';
import {
  createSnapshot,
  csiSnapshot,
  findSnapshot,
  removeSnapshot,
  listShareSnapshots,
  snapshotDirOf,
  type NfsSnapshot,
} from '../snapshots/snapshots.js';

export interface SnapshotRpcs {
  createSnapshot: (req: T.CreateSnapshotRequest, ctx: CallContext) => Promise<T.CreateSnapshotResponse>;
  deleteSnapshot: (req: T.DeleteSnapshotRequest, ctx: CallContext) => Promise<T.DeleteSnapshotResponse>;
  listSnapshots: (req: T.ListSnapshotsRequest, ctx: CallContext) => Promise<T.ListSnapshotsResponse>;
  /**
   * Fills the new claim `target` of CSI volume `name` from its content source; resolves when it is
   * in place. An archive unpacks at most `maxBytes` of file data (the requested capacity).
   */
  restore(
    source: NonNullable<T.CreateVolumeRequest['volumeContentSource']>,
    target: { server: string; share: string; subDir: string },
    name: string,
    ctx: CallContext,
    maxBytes?: number,
  ): Promise<void>;
  /** A share this process uses: ListSnapshots without a filter looks there. */
  remember(server: string, share: string): void;
}

/**
 * csi-driver-nfs's snapshot directory `<dir>` (what its DeleteSnapshot removes), only when it
 * holds its archive (`<src>.tar.gz` or `.tar`) and nothing else: no archive there, no snapshot
 * (OK, nothing done); anything else beside it is not the snapshot's and is left alone.
 */
async function removeUpstreamArchive(store: NfsStore, ref: UpstreamSnapshotRef, o: OpOptions): Promise<boolean> {
  const st = await store.stat(ref.dir, o);
  if (st?.type !== 'dir') return false;
  const archives = new Set([`${ref.src}.tar.gz`, `${ref.src}.tar`]);
  const entries = await store.list(ref.dir, o);
  const ours = entries.filter((e) => e.type === 'file' && archives.has(e.name));
  if (ours.length === 0) return false;
  const other = entries.find((e) => !ours.includes(e));
  if (other)
    throw new FailedPrecondition(
      `${store.server}:${store.share}/${ref.dir} holds ${other.name} besides the csi-driver-nfs archive; ` +
        'the driver removes a snapshot directory only when it holds nothing else: move that entry away first',
    );
  return store.removeTree(ref.dir, o);
}

export function snapshotRpcs(stores: NfsStores, now: () => Date, copies?: CopyProgress): SnapshotRpcs {
  const shares = new Map<string, { server: string; share: string }>();
  const remember = (server: string, share: string) => void shares.set(`${server}#${share}`, { server, share });

  async function restore(
    source: NonNullable<T.CreateVolumeRequest['volumeContentSource']>,
    target: { server: string; share: string; subDir: string },
    name: string,
    ctx: CallContext,
    maxBytes?: number,
  ): Promise<void> {
    const store = stores.open(target.server, target.share);
    const o = { signal: ctx.signal };
    const from = await sourcePath(source, target, ctx.log, o);
    const what = { from: from.path, to: `${target.server}:${target.share}/${target.subDir}` };
    const id = { kind: source.volume ? 'clone' : 'restore', server: target.server, name } as const;
    const fill = () =>
      trackedCopy(copies, ctx.log, id, what, (progress) =>
        from.kind === 'archive'
          ? store.unpackArchive(from.path, target.subDir, { ...o, progress, maxBytes })
          : store.copyTree(from.path, target.subDir, { ...o, progress }),
      );
    const request = {
      name,
      source: source.volume ? `volume:${source.volume.volumeId}` : `snapshot:${source.snapshot?.snapshotId ?? ''}`,
    };
    const stats = await fillIntoPlace(store, target.subDir, request, fill, o);
    if (stats !== 'done') ctx.log.info({ ...what, ...stats }, 'NFS volume filled from its content source');
  }

  /** Where the content source lies on the target's share. */
  async function sourcePath(
    source: NonNullable<T.CreateVolumeRequest['volumeContentSource']>,
    target: { server: string; share: string },
    log: Logger,
    o: { signal: AbortSignal },
  ): Promise<{ kind: 'tree' | 'archive'; path: string }> {
    const sameShare = (r: { server: string; share: string }, what: string) => {
      if (r.server !== target.server || r.share !== target.share) {
        throw new InvalidArgument(
          `${what} is on ${r.server}:${r.share}; NFS restores and clones copy within one share, and the ` +
            `class provisions on ${target.server}:${target.share}`,
        );
      }
    };
    if (source.volume) {
      const v = claimRef(source.volume.volumeId);
      if (typeof v === 'string') throw new NotFound(`source volume "${source.volume.volumeId}" ${v}`);
      sameShare(v, `source volume ${source.volume.volumeId}`);
      const st = await stores.open(v.server, v.share).stat(v.subDir, o);
      if (st?.type !== 'dir') throw new NotFound(`source volume ${source.volume.volumeId} does not exist`);
      return { kind: 'tree', path: v.subDir };
    }
    const id = source.snapshot?.snapshotId ?? '';
    const ref = parseSnapshotId(id);
    if (!ref) throw new NotFound(`snapshot "${id}" is not an nfs.csi.k8s.io snapshot handle`);
    sameShare(ref, `snapshot ${id}`);
    if (ref.kind === 'upstream') {
      // csi-driver-nfs looks for the compressed archive first, then the plain one; so does this.
      const store = stores.open(ref.server, ref.share);
      for (const ext of ['.tar.gz', '.tar']) {
        const path = `${ref.dir}/${ref.src}${ext}`;
        if ((await store.stat(path, o))?.type === 'file') {
          log.info({ snapshotId: id, archive: path }, 'content source is a csi-driver-nfs snapshot archive');
          return { kind: 'archive', path };
        }
      }
      throw new NotFound(
        `snapshot ${id}: no csi-driver-nfs archive ${ref.server}:${ref.share}/${ref.dir}/${ref.src}.tar.gz (or .tar)`,
      );
    }
    const s = await findSnapshot(stores.open(ref.server, ref.share), ref.name, o);
    if (!s) throw new NotFound(`snapshot ${id} does not exist`);
    return { kind: 'tree', path: s.dataPath };
  }

  return {
    remember,
    restore,

    async createSnapshot(req, ctx) {
      const src = claimRef(req.sourceVolumeId);
      if (typeof src === 'string') throw new NotFound(`source volume "${req.sourceVolumeId}" ${src}`);
      const s = await createSnapshot(stores, { ...src, id: req.sourceVolumeId }, req.name, ctx, now, copies);
      // Only once the share answered: a share remembered from a refused call fails every list.
      remember(src.server, src.share);
      return { snapshot: csiSnapshot(s) };
    },

    async deleteSnapshot(req, ctx) {
      const ref = parseSnapshotId(req.snapshotId);
      const o = { signal: ctx.signal };
      if (!ref) {
        ctx.log.warn(
          { snapshotId: req.snapshotId },
          'DeleteSnapshot: not an nfs.csi.k8s.io snapshot handle; nothing to delete',
        );
        return {};
      }
      const store = stores.open(ref.server, ref.share);
      const path = ref.kind === 'ours' ? snapshotDirOf(ref.name) : ref.dir;
      // A csi-driver-nfs handle names any directory below its base (a claim, a parent of
      // claims): only its archive is removed, and the directory only when that left it empty.
      // Ours only when it holds its completion record: a folder without one was never answered as
      // a snapshot id (a killed copy, which its retry or report removes, or one made by hand) and is
      // left alone; the record goes last, so a killed delete's retry still finds it.
      const removed =
        ref.kind === 'ours' ? await removeSnapshot(store, ref.name, o) : await removeUpstreamArchive(store, ref, o);
      ctx.log.info(
        { snapshotId: req.snapshotId, path: `${ref.server}:${ref.share}/${path}`, removed },
        'DeleteSnapshot',
      );
      return {};
    },

    async listSnapshots(req, ctx) {
      const o = { signal: ctx.signal };
      let found: NfsSnapshot[] = [];
      if (req.snapshotId) {
        const ref = parseSnapshotId(req.snapshotId);
        const s = ref?.kind === 'ours' ? await findSnapshot(stores.open(ref.server, ref.share), ref.name, o) : null;
        found = s ? [s] : [];
      } else {
        const v = req.sourceVolumeId ? parseVolumeId(req.sourceVolumeId) : null;
        if (req.sourceVolumeId && !v) return { entries: [], nextToken: '' };
        const where = v ? [{ server: v.server, share: v.share }] : [...shares.values()];
        for (const w of where) found.push(...(await listShareSnapshots(stores.open(w.server, w.share), o)));
      }
      if (req.sourceVolumeId) found = found.filter((s) => s.sourceVolumeId === req.sourceVolumeId);
      const all = found.map(csiSnapshot).sort((a, b) => (a.snapshotId ?? '').localeCompare(b.snapshotId ?? ''));
      const start = req.startingToken ? Number(req.startingToken) : 0;
      if (!Number.isInteger(start) || start < 0 || start > all.length) {
        throw new Busy(`starting_token "${req.startingToken}" is not a position in the snapshot list`);
      }
      const end = req.maxEntries > 0 ? Math.min(all.length, start + req.maxEntries) : all.length;
      return {
        entries: all.slice(start, end).map((snapshot) => ({ snapshot })),
        nextToken: end < all.length ? String(end) : '',
      };
    },
  };
}
