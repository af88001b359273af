// Controller backend of nfs.csi.k8s.io: one directory per volume on an NFS share, managed over
// the NFS protocol from user space (no mount, no privileges). Volume-level serialisation comes
// from the server's keyed locks; nothing here assumes two different names never meet on the
// same directory (the store's operations tolerate that).
import type { Logger } from 'pino';
import type { CallContext, ControllerBackend } from '../../csi/types.js';
import type * as T from '../../csi/types.js';
import { AlreadyExists, InvalidArgument, NotFound } from '../../errors.js';
import { createNfsStores, nfsVersionOf } from './store/stores.js';
import { parseCreateParams, type VolumeParams } from './params.js';
import { NFS_CONTEXT, type OnDelete } from '../contract.js';
import { archiveVolume, deleteVolumeDir } from './rpc/policy.js';
import type { NfsStores } from './store/store.js';
import { composeVolumeId, type VolumeRef } from '../volume-id.js';
import { claimRef } from './rpc/claim-ref.js';
import { ACCESS_MODE_NAMES, accessModeName } from '../../csi/access-modes.js';
import { parseCapacityRange } from '../../csi/capacity.js';
import { type BackendHealth, HealthLog } from '../../csi/health.js';
import { confirmed } from '../../controller/confirm.js';
import { snapshotRpcs } from './rpc/snapshot-rpcs.js';
import { forgetFilled, forgetRestores } from './snapshots/fill-records.js';
import { usableSnapshotStore } from './snapshots/snapshots.js';
import type { CopyProgress } from './copy/copy-progress.js';

export interface NfsControllerOptions {
  log: Logger;
  /** Upper bound of one NFS protocol call (connecting included). */
  callTimeoutMs: number;
  /** Fixed NFS/MOUNT ports instead of asking the server's portmapper. */
  nfsPort?: number;
  mountPort?: number;
  /** Use a source port below 1024 when allowed (default true); see rpc.ts. */
  privilegedPort?: boolean;
  /** Policy for handles without one (upstream --default-ondelete-policy); default delete. */
  defaultOnDelete?: OnDelete;
  /** A server's NFS session unused this long is closed; default 5 min. */
  idleSessionMs?: number;
  /** How long a fall back from NFSv3 to NFSv4 holds before v3 is tried again (stores.ts). */
  versionRecheckMs?: number;
  /** The NAS port; defaults to the NFSv3 protocol client. Tests pass a fake. */
  stores?: NfsStores;
  /** Clock for archive-name suffixes. */
  now?: () => Date;
  /** The running snapshot, restore and clone copies as gauges (served with the metrics). */
  copyProgress?: CopyProgress;
}

export type NfsController = ControllerBackend & {
  /** True when every NFS server in use answers a NULL call; never throws. Backend health, not Probe. */
  probe(signal: AbortSignal): Promise<boolean>;
  /** Per NFS server with an open session: does it answer. Transitions are logged. */
  health(signal: AbortSignal): Promise<BackendHealth[]>;
  close(): Promise<void>;
};

/** A directory on a share serves every access mode. */
const ACCESS_MODES = new Set<string>(ACCESS_MODE_NAMES.filter((m) => m !== 'UNKNOWN'));

/** Why these capabilities cannot be served, or null when they can. */
export function unsupportedCapability(caps: T.VolumeCapability[]): string | null {
  for (const c of caps) {
    if (c.block || c.accessType === 'block')
      return 'block access type is not supported by NFS volumes; request a filesystem volume';
    if (!c.mount && c.accessType !== 'mount') return 'volume capability has no access type; NFS volumes need "mount"';
    const mode = accessModeName(c.accessMode?.mode);
    if (!ACCESS_MODES.has(mode)) return `access mode ${mode} is not supported`;
  }
  return null;
}

/** Remembers what each volume name was created with, so a conflicting repeat is refused. */
class CreatedVolumes {
  private readonly byName = new Map<string, { id: string; required: number; limit: number }>();
  constructor(private readonly max = 10_000) {}

  check(name: string, id: string, required: number, limit: number): void {
    const prev = this.byName.get(name);
    if (prev && (prev.id !== id || prev.required !== required || prev.limit !== limit)) {
      throw new AlreadyExists(
        `volume "${name}" already exists with ${prev.id !== id ? `handle ${prev.id}` : `capacity ${prev.required}..${prev.limit} bytes`}; ` +
          'a repeated CreateVolume must use the same parameters and capacity',
      );
    }
  }

  remember(name: string, id: string, required: number, limit: number): void {
    this.byName.delete(name);
    this.byName.set(name, { id, required, limit });
    const oldest = this.byName.keys().next();
    if (this.byName.size > this.max && !oldest.done) this.byName.delete(oldest.value);
  }

  forget(id: string): void {
    for (const [name, v] of this.byName) if (v.id === id) this.byName.delete(name);
  }
}

export function createNfsController(opts: NfsControllerOptions): NfsController {
  const stores =
    opts.stores ??
    createNfsStores({
      timeoutMs: opts.callTimeoutMs,
      nfsPort: opts.nfsPort,
      mountPort: opts.mountPort,
      privilegedPort: opts.privilegedPort ?? true,
      log: opts.log,
      versionRecheckMs: opts.versionRecheckMs,
      ...(opts.idleSessionMs !== undefined && { idleMs: opts.idleSessionMs }),
    });
  const defaultOnDelete = opts.defaultOnDelete ?? 'delete';
  const healthLog = new HealthLog(opts.log);
  const now = opts.now ?? (() => new Date());
  const created = new CreatedVolumes();
  const snapshots = snapshotRpcs(stores, now, opts.copyProgress);

  const where = (r: { server: string; share: string; subDir: string }) =>
    `${r.server}:${r.share.replace(/\/$/, '')}/${r.subDir}`;

  async function existingVolume(id: string, ctx: CallContext): Promise<VolumeRef> {
    const ref = claimRef(id);
    if (typeof ref === 'string') throw new NotFound(`volume "${id}" ${ref}`);
    const st = await stores.open(ref.server, ref.share).stat(ref.subDir, { signal: ctx.signal });
    if (!st || st.type !== 'dir') throw new NotFound(`volume ${id}: directory ${where(ref)} does not exist`);
    return ref;
  }

  function context(p: VolumeParams): Record<string, string> {
    const c: Record<string, string> = {
      [NFS_CONTEXT.server]: p.server,
      [NFS_CONTEXT.share]: p.share,
      [NFS_CONTEXT.subDir]: p.subDir,
    };
    if (p.mountPermissions !== undefined) c[NFS_CONTEXT.mountPermissions] = '0' + p.mountPermissions.toString(8);
    return c;
  }

  return {
    capabilities: [
      'CREATE_DELETE_VOLUME',
      'EXPAND_VOLUME',
      'SINGLE_NODE_MULTI_WRITER',
      'CREATE_DELETE_SNAPSHOT',
      'LIST_SNAPSHOTS',
      'CLONE_VOLUME',
    ],

    // Required fields (name, ids, capabilities, capacity range) are checked once, before these
    // run, by the CSI service (src/csi/validate.ts); what is left here is NFS's own rules.
    async createVolume(req, ctx) {
      const bad = unsupportedCapability(req.volumeCapabilities);
      if (bad) throw new InvalidArgument(bad);
      const { required, limit } = parseCapacityRange(req.capacityRange);
      const p = parseCreateParams(req.name, req.parameters, defaultOnDelete);
      const id = composeVolumeId({ ...p, uuid: p.subDirFromParam ? req.name : '' });
      created.check(req.name, id, required, limit);

      // The version the node will mount with, when the class names one (mountOptions).
      const version = nfsVersionOf(req.volumeCapabilities.flatMap((c) => c.mount?.mountFlags ?? []));
      const store = stores.open(p.server, p.share, version);
      const source = req.volumeContentSource;
      if (source) await snapshots.restore(source, p, req.name, ctx, required || limit || undefined);
      else {
        // A plain create takes the directory as it is; no restore record of it may outlive that.
        const dropped = await forgetRestores(store, p.subDir, { signal: ctx.signal });
        if (dropped.length > 0)
          ctx.log.warn(
            { path: where(p), records: dropped },
            'CreateVolume: the directory was left by a restore that did not finish; taken as it is, its records removed',
          );
      }
      const st = await store.ensureDir(
        p.subDir,
        // A restored or cloned claim keeps its source's root directory attributes.
        source ? {} : { mode: p.mountPermissions, uid: p.uid, gid: p.gid },
        { signal: ctx.signal },
      );
      // Only a share the server let this claim be made on: ListSnapshots without a filter looks
      // there, and a share refused once would fail every later list.
      snapshots.remember(p.server, p.share);
      created.remember(req.name, id, required, limit);
      ctx.log.info(
        { volumeId: id, path: where(p), mode: '0' + st.mode.toString(8), uid: st.uid, gid: st.gid },
        'NFS volume directory ready',
      );
      return {
        volume: {
          volumeId: id,
          // No quota on a directory: report what was asked for, like upstream's PVC-size default.
          capacityBytes: required || limit,
          volumeContext: context(p),
          ...(source && { contentSource: source }),
        },
      };
    },

    async deleteVolume(req, ctx) {
      const ref = claimRef(req.volumeId);
      if (typeof ref === 'string') {
        ctx.log.warn({ volumeId: req.volumeId }, `DeleteVolume: the handle ${ref}; nothing to delete`);
        return {};
      }
      created.forget(req.volumeId);
      const policy = ref.onDelete ?? defaultOnDelete;
      const store = stores.open(ref.server, ref.share);
      const o = { signal: ctx.signal };
      // Checked before the claim is touched: its records must be removable after it.
      if (policy !== 'retain') await usableSnapshotStore(store, o);
      if (policy === 'retain') {
        ctx.log.info({ volumeId: req.volumeId, path: where(ref) }, 'DeleteVolume: onDelete=retain, directory kept');
      } else if (policy === 'archive') {
        const r = await archiveVolume(store, ref.subDir, now(), o);
        const to = typeof r === 'object' ? where({ ...ref, subDir: r.archivedTo }) : undefined;
        const what = {
          missing: 'DeleteVolume: nothing to archive',
          'empty-removed': 'DeleteVolume: directory was empty, removed instead of archived',
        };
        ctx.log.info(
          { volumeId: req.volumeId, path: where(ref), archivedTo: to },
          typeof r === 'object' ? 'DeleteVolume: directory archived' : what[r],
        );
      } else {
        const removed = await deleteVolumeDir(store, ref.subDir, o);
        ctx.log.info({ volumeId: req.volumeId, path: where(ref), removed }, 'DeleteVolume: directory deleted');
      }
      // The claim's filled records (snapshots.ts) go with its directory, last, so that a retry
      // after a kill still finds them. Retain makes no NAS call, as upstream's; the record it keeps
      // names this claim's CSI volume name, which no later claim has, so no later restore is
      // answered with the retained directory, and report lists it once the directory is gone.
      if (policy !== 'retain') await forgetFilled(store, ref.subDir, o);
      return {};
    },

    async validateVolumeCapabilities(req, ctx) {
      await existingVolume(req.volumeId, ctx);
      const bad = unsupportedCapability(req.volumeCapabilities);
      if (bad) return { message: bad };
      return confirmed(req);
    },

    async controllerExpandVolume(req, ctx) {
      if (req.volumeCapability) {
        const bad = unsupportedCapability([req.volumeCapability]);
        if (bad) throw new InvalidArgument(bad);
      }
      const { required, limit } = parseCapacityRange(req.capacityRange);
      await existingVolume(req.volumeId, ctx);
      // Directories have no size: any request is met, and there is nothing to grow on the node.
      return { capacityBytes: required || limit, nodeExpansionRequired: false };
    },

    createSnapshot: snapshots.createSnapshot,
    deleteSnapshot: snapshots.deleteSnapshot,
    listSnapshots: snapshots.listSnapshots,

    async probe(signal) {
      return (await this.health(signal)).every((h) => h.up);
    },

    async health(signal) {
      return healthLog.note(await stores.health(signal));
    },

    close: () => stores.close(),
  };
}
