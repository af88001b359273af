// CreateVolume, DeleteVolume, ValidateVolumeCapabilities and GetCapacity for Proxmox disks.
import type * as T from '../../../csi/types.js';
import { AlreadyExists, InvalidArgument, ResourceExhausted, isCsiError } from '../../../errors.js';
import { defined } from '../../../defined.js';
import type { StorageResource } from '../../api/api.js';
import { type Cluster, holdsImages, isAvailable } from '../state/cluster.js';
import {
  type ControllerHandler,
  type Core,
  capabilityProblem,
  diskFacts,
  findVolume,
  placementsOf,
  foundVolume,
  ifOurVolume,
  requireVolume,
  topologyOf,
} from '../core.js';
import { outcomeUncertain } from '../../api/errors.js';
import { unlinkFrom } from '../safety/leftovers.js';
import { decideFree, must, permitCreate } from '../safety/ownership.js';
import { readFresh } from '../safety/fresh-read.js';
import { freeMarkers } from './modify.js';
import { markersOf } from '../params/mutable.js';
import { mutableContext, parseMutableParameters } from '../params/mutable.js';
import { TOPOLOGY_REGION_KEY, TOPOLOGY_ZONE_KEY } from '../../contract.js';
import { parseCreateParameters, sizeFits, sizeForCreate, volumeContextOf } from '../params/params.js';
import { retryBusy, waitTask } from '../../api/tasks.js';
import { diskNameFor, formatVolumeId, volidOf } from '../../volume-id.js';
import { isSharedStorage, kindForCreate } from '../../storage/kinds.js';
import { volnameFor } from '../../storage/kind.js';
import { confirmed } from '../../../controller/confirm.js';
import { guardedCapacity, guardPlacement } from './capacity-guard.js';
import { deleteRestored, restoreVolume } from './restore.js';
import { namedHelper } from '../copy/thin-copy.js';
import { copyContext } from './copy-context.js';

interface Target {
  cluster: Cluster;
  zones: string[];
  shared: boolean;
  /** The storage's pve-storage plugin type (storage/kinds.ts), as the resources list says. */
  plugintype: string | undefined;
}

/** Where a new volume may go: the cluster, and the nodes in order of preference. */
async function placeVolume(
  core: Core,
  req: T.CreateVolumeRequest,
  storage: string,
  signal: AbortSignal,
): Promise<Target> {
  const placements = placementsOf(req.accessibilityRequirements);
  const regions = [...new Set(placements.map((p) => p.region ?? core.defaultRegion))];
  const known = regions.filter((r) => core.clusters.has(r));
  if (placements.length > 0 && known.length === 0) {
    throw new ResourceExhausted(
      `no configured Proxmox cluster serves region(s) ${regions.join(', ')} (configured: ${[...core.clusters.keys()].join(', ')})`,
    );
  }
  const region = known[0] ?? core.defaultRegion;
  const cluster = defined(core.clusters.get(region), `the cluster of region ${region}`);
  const rows = await cluster.storageRows(storage, signal);
  if (rows.length === 0)
    throw new InvalidArgument(`parameter "storage": storage "${storage}" does not exist in Proxmox cluster ${region}`);
  const usable = rows.filter((r) => holdsImages(r));
  if (usable.length === 0)
    throw new InvalidArgument(
      `parameter "storage": storage "${storage}" does not hold disk images (content: ${defined(rows[0], 'the first storage row').content})`,
    );
  const up = usable.filter(isAvailable);
  const plugintype = usable.find((r) => r.plugintype)?.plugintype;
  const shared = usable.some((r) => isSharedStorage(r.plugintype, r.shared));
  const inRegion = placements.filter((p) => (p.region ?? core.defaultRegion) === region);
  let zones: string[];
  if (inRegion.some((p) => p.zone)) {
    zones = [...new Set(inRegion.map((p) => p.zone).filter((z): z is string => !!z))].filter((z) =>
      up.some((r) => r.node === z),
    );
    if (zones.length === 0) {
      throw new ResourceExhausted(
        `storage "${storage}" is not available on the requested host(s) ${inRegion
          .map((p) => p.zone)
          .filter(Boolean)
          .join(', ')} of cluster ${region} (available on: ${up.map((r) => r.node).join(', ') || 'none'})`,
      );
    }
  } else {
    zones = up.map((r) => r.node).sort();
    if (zones.length === 0)
      throw new ResourceExhausted(`storage "${storage}" is not available on any host of cluster ${region}`);
  }
  return { cluster, zones: shared ? zones.slice(0, 1) : zones, shared, plugintype };
}

/**
 * Where the disk already is among these hosts: from the cluster's content view (content-cache.ts;
 * this process's own allocations are in it), or read now with `fresh`.
 */
async function existingOn(
  cluster: Cluster,
  zones: readonly string[],
  storage: string,
  disk: string,
  owner: number,
  signal: AbortSignal,
  fresh: boolean,
): Promise<{ zone: string; size: number } | undefined> {
  const volid = volidOf(storage, disk);
  const found = await Promise.all(
    zones.map(async (zone) => {
      const items = await cluster.content.list(zone, storage, owner, signal, fresh);
      const item = items.find((i) => i.volid === volid);
      return item ? { zone, size: item.size } : undefined;
    }),
  );
  return found.find((f) => f !== undefined);
}

export const createVolume: ControllerHandler<'createVolume'> = async (core, req, ctx) => {
  if (req.volumeContentSource?.snapshot || req.volumeContentSource?.volume) return restoreVolume(core, req, ctx);
  const params = parseCreateParameters(req.parameters);
  // A VolumeAttributesClass at creation: its values go into the context like StorageClass ones.
  const mutable = mutableContext(parseMutableParameters(req.mutableParameters));
  const problem = capabilityProblem(req.volumeCapabilities, params);
  if (problem) throw new InvalidArgument(problem);
  const size = sizeForCreate(req.capacityRange);
  const target = await placeVolume(core, req, params.storage, ctx.signal);
  const { cluster } = target;
  const { kind, format } = kindForCreate(params.storage, target.plugintype, params.format);
  const disk = volnameFor(kind, diskNameFor(core.controllerVmId, req.name), core.controllerVmId, format);

  const answer = (zone: string, bytes: number): T.CreateVolumeResponse => ({
    volume: {
      // A shared storage's volume belongs to the region, not a host (upstream's `region//storage/disk`).
      volumeId: formatVolumeId({
        region: cluster.region,
        zone: target.shared ? '' : zone,
        storage: params.storage,
        disk,
      }),
      capacityBytes: String(bytes),
      volumeContext: { ...volumeContextOf(req.parameters), ...mutable },
      accessibleTopology: [topologyOf(cluster.region, target.shared ? undefined : zone)],
    },
  });
  const reuse = (found: { zone: string; size: number }): T.CreateVolumeResponse => {
    if (!sizeFits(found.size, req.capacityRange)) {
      throw new AlreadyExists(
        `volume ${req.name} already exists as ${volidOf(params.storage, disk)} on ${found.zone} with ${found.size} bytes, which does not match the requested capacity`,
      );
    }
    return answer(found.zone, found.size);
  };

  // The first host is not read: the allocation itself says whether the name exists there (one
  // call on the happy path). Other candidate hosts are looked up in the content view, so a retry
  // whose preferred host changed reuses the disk instead of making a second one.
  const [first, ...others] = target.zones as [string, ...string[]];
  const elsewhere = await existingOn(cluster, others, params.storage, disk, core.controllerVmId, ctx.signal, false);
  if (elsewhere) return reuse(elsewhere);
  const known = cluster.content.peek(first, params.storage, core.controllerVmId, volidOf(params.storage, disk));
  if (known) return reuse({ zone: first, size: known.size });
  // CSI: a name a restore or clone took (its volume VM's record, cluster-wide) is ALREADY_EXISTS
  // without a content source. The cached VM list: a volume VM is read only when one is there.
  const prior = await namedHelper(
    copyContext(core, cluster, ctx),
    await cluster.locator.list(ctx.signal),
    'volume',
    req.name,
  );
  if (prior)
    throw new AlreadyExists(
      `volume ${req.name} already exists, made from ${prior.record.source}, not without a content source`,
    );
  // The ownership gate first (a name it refuses costs nothing), then the thin-pool guard
  // (capacity-guard.ts): the first candidate host with room, or refused.
  const facts = diskFacts(core, { storage: params.storage, disk });
  const named = permitCreate(facts, first, size, req.name);
  if (!named.allowed) throw new InvalidArgument(named.refusal.message);
  const { zone, release } = await guardPlacement(
    core,
    cluster,
    [first, ...others],
    params.storage,
    size,
    `CreateVolume ${req.name}`,
    ctx.signal,
    async () => !!(await existingOn(cluster, [first], params.storage, disk, core.controllerVmId, ctx.signal, true)),
  );
  const permit = must(permitCreate(facts, zone, size, req.name));
  try {
    await retryBusy(() => cluster.port.allocDisk(permit, { signal: ctx.signal }), { signal: ctx.signal });
  } catch (e) {
    // "already exists" (a retry), or no answer: the call may have arrived though its answer was
    // lost. Read the storage back instead of trusting the error.
    if (!outcomeUncertain(e)) {
      if (isCsiError(e, 'ResourceExhausted'))
        throw new ResourceExhausted(
          `storage ${params.storage} on ${zone} has no room for ${size} bytes: ${(e as Error).message}`,
          { cause: e },
        );
      throw e;
    }
    const after = await existingOn(cluster, [zone], params.storage, disk, core.controllerVmId, ctx.signal, true);
    if (!after) throw e;
    if (!isCsiError(e, 'AlreadyExists'))
      ctx.log.info(
        { volid: volidOf(params.storage, disk), err: (e as Error).message },
        'allocation reported an error but the disk exists',
      );
    return reuse(after);
  } finally {
    release();
  }
  cluster.content.added(zone, params.storage, core.controllerVmId, {
    volid: volidOf(params.storage, disk),
    size,
    vmid: core.controllerVmId,
    format,
  });
  ctx.log.info({ volid: volidOf(params.storage, disk), zone, size }, 'disk allocated');
  return answer(zone, size);
};

export const deleteVolume: ControllerHandler<'deleteVolume'> = async (core, req, ctx) => {
  return ifOurVolume(core, req.volumeId, ctx, 'delete', async (v) => {
    // A restored or cloned volume is owned by its volume VM (restore.ts), not the controller VMID.
    if (await deleteRestored(core, req.volumeId, ctx)) return {};
    const { cluster, ref, volid } = v;
    cluster.fences.check(volid, `deleting ${volid}`);
    const found = await findVolume(v, ctx.signal, true);
    if (!found) {
      ctx.log.info({ volid }, 'disk is already gone');
      return {};
    }
    // The ownership gate decides on a read taken now (fresh-read.ts): the disk's name, and every
    // key of every VM config on its host(s), pending and snapshot sections included.
    const view = await readFresh(cluster, ref.zone ? [ref.zone] : undefined, ctx.signal);
    const markers = markersOf(found.items, ref.storage, ref.disk).map((m) => m.volid);
    const leave = must(decideFree(diskFacts(core, ref), found.node, view, markers));
    // An interrupted offline expansion is no reason to keep a volume forever.
    if (leave.helperHolders.length) {
      ctx.log.warn(
        { disk: volid, vms: leave.helperHolders.map((h) => h.vmid) },
        'removing helper attachments left by an interrupted offline expansion',
      );
      await unlinkFrom(cluster, leave.helperHolders, ref, ctx.signal);
    }
    // Markers first: one left behind would outlive its disk, the disk never outlives them.
    await freeMarkers(v, found.node, leave.markers, ctx.signal);
    // The free task runs to its outcome even when the caller gives up (fences.ts). `delay`:
    // Proxmox answers once the task ended (null), so no task poll on the happy path.
    await retryBusy(
      () =>
        cluster.fences.run(
          volid,
          'free',
          undefined,
          async () => {
            try {
              const upid = await cluster.port.freeDisk(leave.disk, { waitSeconds: 5 });
              if (upid)
                await waitTask(cluster.api, found.node, upid, { cluster: cluster.region, what: `free ${volid}` });
            } catch (e) {
              if (isCsiError(e, 'NotFound')) return;
              if (!outcomeUncertain(e) || (await findVolume(v))) throw e;
            }
          },
          ctx.signal,
        ),
      { signal: ctx.signal },
    );
    cluster.content.removed(found.node, ref.storage, volid);
    ctx.log.info({ volid, node: found.node }, 'disk freed');
    return {};
  });
};

export const validateVolumeCapabilities: ControllerHandler<'validateVolumeCapabilities'> = async (core, req, ctx) => {
  await foundVolume(requireVolume(core, req.volumeId), req.volumeId, ctx.signal);
  let fsType;
  if (Object.keys(req.parameters).length > 0) {
    try {
      fsType = parseCreateParameters(req.parameters).fsType;
    } catch (e) {
      return { message: (e as Error).message };
    }
  }
  const problem = capabilityProblem(req.volumeCapabilities, { fsType });
  if (problem) return { message: problem };
  return confirmed(req);
};

export const getCapacity: ControllerHandler<'getCapacity'> = async (core, req, ctx) => {
  if (capabilityProblem(req.volumeCapabilities)) return { availableCapacity: '0' };
  const seg = req.accessibleTopology?.segments ?? {};
  const region = seg[TOPOLOGY_REGION_KEY];
  const zone = seg[TOPOLOGY_ZONE_KEY];
  const storage = req.parameters.storage || undefined;
  const clusters = region ? [core.clusters.get(region)].filter((c): c is Cluster => !!c) : [...core.clusters.values()];
  const [only] = clusters;
  if (zone && storage && only && clusters.length === 1) {
    try {
      const st = await only.api.storageStatus(zone, storage, { signal: ctx.signal });
      return { availableCapacity: String(await guardedCapacity(core, only, zone, storage, st, ctx.signal)) };
    } catch (e) {
      if (isCsiError(e, 'NotFound')) return { availableCapacity: '0' };
      throw e;
    }
  }
  let total = 0;
  for (const c of clusters) {
    const seen = new Set<string>();
    const rows = (await c.storages(ctx.signal)).filter(
      (r: StorageResource) =>
        holdsImages(r) && isAvailable(r) && (!storage || r.storage === storage) && (!zone || r.node === zone),
    );
    for (const r of rows) {
      const key = r.shared ? r.storage : `${r.node}/${r.storage}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const st = { total: r.maxdisk ?? 0, used: r.disk ?? 0, avail: (r.maxdisk ?? 0) - (r.disk ?? 0), active: true };
      total += await guardedCapacity(core, c, r.node, r.storage, st, ctx.signal);
    }
  }
  return { availableCapacity: String(total) };
};
