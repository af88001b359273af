// ControllerModifyVolume (VolumeAttributesClass): remember the new values beside the disk (a
// marker volume, see mutable.ts) and rewrite the drive line of every VM that has the disk
// attached, through that VM's queue. A detached disk gets the values at its next publish.
import { isCsiError } from '../../../errors.js';
import {
  type ControllerHandler,
  type ResolvedVolume,
  diskFacts,
  foundVolume,
  requireMarkers,
  requireVolume,
} from '../core.js';
import { outcomeUncertain } from '../../api/errors.js';
import {
  type Marker,
  driveChanges,
  markerName,
  markersOf,
  mergeMutable,
  parseMutableParameters,
} from '../params/mutable.js';
import { type ModifyLeave, type OwnershipPermit, decideModify, must } from '../safety/ownership.js';
import { retryBusy, waitTask } from '../../api/tasks.js';
import { diskOwner, parseVolid } from '../../volume-id.js';

/** The disk's markers on its node, newest first. */
export async function readMarkers(
  v: ResolvedVolume,
  node: string,
  signal?: AbortSignal,
  cached = false,
): Promise<Marker[]> {
  const items = await v.cluster.content.list(node, v.ref.storage, diskOwner(v.ref.disk), signal, !cached);
  return markersOf(items, v.ref.storage, v.ref.disk);
}

/** Frees marker volumes (each one permitted by the ownership gate); one already gone is fine. */
export async function freeMarkers(
  v: ResolvedVolume,
  node: string,
  markers: ReadonlyArray<OwnershipPermit<'free'>>,
  signal?: AbortSignal,
): Promise<void> {
  for (const m of markers) {
    const { volid } = m.body;
    await retryBusy(
      async () => {
        try {
          const upid = await v.cluster.port.freeDisk(m, { signal, waitSeconds: 5 });
          if (upid)
            await waitTask(v.cluster.api, node, upid, { cluster: v.cluster.region, what: `free ${volid}`, signal });
          v.cluster.content.removed(node, v.ref.storage, volid);
        } catch (e) {
          if (isCsiError(e, 'NotFound')) return;
          if (!outcomeUncertain(e)) throw e;
          const left = await readMarkers(v, node, signal);
          if (left.some((x) => x.volid === volid)) throw e;
        }
      },
      { signal },
    );
  }
}

/**
 * Stores the values as the disk's newest marker (the gate's permit names it: sequence above
 * every existing one) and then frees the older ones. A crash in between leaves two markers; the
 * newer one wins, and the next modification or DeleteVolume removes the other.
 */
async function storeMarker(v: ResolvedVolume, node: string, leave: ModifyLeave, signal: AbortSignal): Promise<void> {
  const name = leave.marker.body.req.filename;
  try {
    await retryBusy(() => v.cluster.port.allocDisk(leave.marker, { signal }), { signal });
    v.cluster.content.invalidate(node, v.ref.storage);
  } catch (e) {
    v.cluster.content.invalidate(node, v.ref.storage);
    // The call may have landed although it reported an error (a lost answer, a resent POST).
    const now = await readMarkers(v, node, signal);
    if (!now.some((m) => parseVolid(m.volid)?.disk === name)) throw e;
  }
  await freeMarkers(v, node, leave.older, signal);
}

export const controllerModifyVolume: ControllerHandler<'controllerModifyVolume'> = async (core, req, ctx) => {
  const change = parseMutableParameters(req.mutableParameters);
  const v = requireVolume(core, req.volumeId);
  const { cluster, ref, volid } = v;
  return cluster.exclusive(volid, async () => {
    const found = await foundVolume(v, req.volumeId, ctx.signal);
    if (Object.keys(change).length === 0) return {};
    await requireMarkers(v, ctx.signal);
    // The VMs' drive lines as they are now (a fresh read of each VM on the volume's host): the
    // ownership gate decides on them before anything is created or rewritten. A restored volume
    // is ours only while its volume VM is (its name and record): the VM list read now, not cached.
    if (diskOwner(ref.disk) !== core.controllerVmId) cluster.locator.invalidate();
    const [markers, scan, vms] = await Promise.all([
      readMarkers(v, found.node, ctx.signal),
      cluster.index.scan({ signal: ctx.signal, nodes: ref.zone ? [ref.zone] : undefined }),
      cluster.locator.list(ctx.signal),
    ]);
    const values = mergeMutable(markers[0]?.values ?? {}, change);
    const same = markers.length === 1 && JSON.stringify(markers[0]?.values) === JSON.stringify(values);
    const next = markerName(ref.disk, (markers[0]?.seq ?? 0) + 1, values);
    const leave = must(
      decideModify(
        diskFacts(core, ref),
        found.node,
        { vms, entries: scan },
        next,
        markers.map((m) => m.volid),
      ),
    );
    if (!same) await storeMarker(v, found.node, leave, ctx.signal);

    const options = driveChanges(values);
    for (const vm of leave.vms)
      await cluster.queues.update(vm, { storage: ref.storage, disk: ref.disk, options }, ctx.signal);
    ctx.log.info(
      { volid, values, vms: leave.vms.map((x) => x.vmid) },
      leave.vms.length ? 'volume modified on its VM(s)' : 'volume modified; applies at its next publish',
    );
    return {};
  });
};
