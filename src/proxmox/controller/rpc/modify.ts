// ControllerModifyVolume (VolumeAttributesClass): remember the new values beside the disk (a
// marker volume, see mutable.ts) and rewrite the drive line of every VM that has the disk
// attached, through that VM's queue. A detached disk gets the values at its next publish.
import { isCsiError } from '../../../errors.js';
import { defined } from '../../../defined.js';
import { type ControllerHandler, type ResolvedVolume, foundVolume, requireVolume } from '../core.js';
import { isHelperSite } from '../state/drives.js';
import { outcomeUncertain } from '../../api/errors.js';
import {
  MARKER_BYTES,
  type Marker,
  type MutableValues,
  driveChanges,
  markerName,
  markersOf,
  mergeMutable,
  parseMutableParameters,
} from '../params/mutable.js';
import { usesOf } from '../state/scan.js';
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

/** Frees marker volumes; one already gone is fine. */
export async function freeMarkers(
  v: ResolvedVolume,
  node: string,
  markers: readonly Marker[],
  signal?: AbortSignal,
): Promise<void> {
  for (const m of markers) {
    await retryBusy(
      async () => {
        try {
          const upid = await v.cluster.api.freeDisk(node, v.ref.storage, m.volid, { signal, waitSeconds: 5 });
          if (upid)
            await waitTask(v.cluster.api, node, upid, { cluster: v.cluster.region, what: `free ${m.volid}`, signal });
          v.cluster.content.removed(node, v.ref.storage, m.volid);
        } catch (e) {
          if (isCsiError(e, 'NotFound')) return;
          if (!outcomeUncertain(e)) throw e;
          const left = await readMarkers(v, node, signal);
          if (left.some((x) => x.volid === m.volid)) throw e;
        }
      },
      { signal },
    );
  }
}

/**
 * Stores `values` as the disk's newest marker (sequence above every existing one) and then
 * frees the older ones. A crash in between leaves two markers; the newer one wins, and the
 * next modification or DeleteVolume removes the other.
 */
async function storeMarker(
  v: ResolvedVolume,
  node: string,
  values: MutableValues,
  existing: Marker[],
  signal: AbortSignal,
): Promise<void> {
  const newest = existing[0];
  const seq = (newest?.seq ?? 0) + 1;
  const name = markerName(v.ref.disk, seq, values);
  const owner = defined(diskOwner(v.ref.disk), `the owner VMID in disk name ${v.ref.disk}`);
  try {
    await retryBusy(
      () =>
        v.cluster.api.allocDisk(
          node,
          v.ref.storage,
          { vmid: owner, filename: name, sizeBytes: MARKER_BYTES, format: 'raw' },
          { signal },
        ),
      { signal },
    );
    v.cluster.content.invalidate(node, v.ref.storage);
  } catch (e) {
    v.cluster.content.invalidate(node, v.ref.storage);
    // The call may have landed although it reported an error (a lost answer, a resent POST).
    const now = await readMarkers(v, node, signal);
    if (!now.some((m) => parseVolid(m.volid)?.disk === name)) throw e;
  }
  await freeMarkers(v, node, existing, signal);
}

export const controllerModifyVolume: ControllerHandler<'controllerModifyVolume'> = async (core, req, ctx) => {
  const change = parseMutableParameters(req.mutableParameters);
  const v = requireVolume(core, req.volumeId);
  const { cluster, ref, volid } = v;
  return cluster.exclusive(volid, async () => {
    const found = await foundVolume(v, req.volumeId, ctx.signal);
    if (Object.keys(change).length === 0) return {};
    const markers = await readMarkers(v, found.node, ctx.signal);
    const values = mergeMutable(markers[0]?.values ?? {}, change);
    const same = markers.length === 1 && JSON.stringify(markers[0]?.values) === JSON.stringify(values);
    if (!same) await storeMarker(v, found.node, values, markers, ctx.signal);

    // The live drive lines: every VM on the volume's host that has it attached.
    const scan = await cluster.index.scan({ signal: ctx.signal, nodes: ref.zone ? [ref.zone] : undefined });
    const vms = new Map(
      usesOf(scan, ref.storage, ref.disk)
        .sites.filter((s) => !isHelperSite(s.site))
        .map((s) => [s.vm.vmid, { vmid: s.vm.vmid, node: s.vm.node, name: s.vm.name }]),
    );
    const options = driveChanges(values);
    for (const vm of vms.values())
      await cluster.queues.update(vm, { storage: ref.storage, disk: ref.disk, options }, ctx.signal);
    ctx.log.info(
      { volid, values, vms: [...vms.keys()] },
      vms.size ? 'volume modified on its VM(s)' : 'volume modified; applies at its next publish',
    );
    return {};
  });
};
