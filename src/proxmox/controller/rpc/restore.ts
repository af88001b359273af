// CreateVolume with a volume_content_source: a restore from a snapshot (ours, or a
// proxmox-csi-plugin copy) or a clone of a volume, both as a thin linked clone on the source's
// host (docs/snapshots.md). The new volume is `vm-<volume VM>-disk-0`: Proxmox names clones, so
// the handle records that disk, and the volume VM's record names the new volume, which makes
// a retry find it. A larger request is cloned, then grown. Into another host it would take the
// offline migration; that is refused.
import type * as T from '../../../csi/types.js';
import { AlreadyExists, InvalidArgument, NotFound, OutOfRange, ResourceExhausted } from '../../../errors.js';
import { type Core, capabilityProblem, findVolume, placementsOf, resolveVolume, topologyOf } from '../core.js';
import { restoreCopy, runStep } from '../copy/thin-copy.js';
import { COPY_VM_NAMES } from '../safety/copy-vms.js';
import { parseCreateParameters, sizeForCreate, volumeContextOf } from '../params/params.js';
import { guardGrowth } from './capacity-guard.js';
import { markersOf } from '../params/mutable.js';
import { diskOwner, formatVolumeId, parseVolid } from '../../volume-id.js';
import { copyContext } from './snapshot.js';

export async function restoreVolume(
  core: Core,
  req: T.CreateVolumeRequest,
  ctx: T.CallContext,
): Promise<T.CreateVolumeResponse> {
  const src = req.volumeContentSource;
  const sourceId = src?.snapshot?.snapshotId ?? src?.volume?.volumeId ?? '';
  const what = src?.snapshot ? 'snapshot' : 'volume';
  const params = parseCreateParameters(req.parameters);
  const problem = capabilityProblem(req.volumeCapabilities, params);
  if (problem) throw new InvalidArgument(problem);
  const v = resolveVolume(core, sourceId);
  if (!v) throw new NotFound(`source ${what} ${sourceId} does not exist (not a handle of this driver)`);
  const found = await findVolume(v, ctx.signal);
  if (!found) throw new NotFound(`source ${what} ${sourceId} does not exist`);
  if (v.ref.storage !== params.storage)
    throw new InvalidArgument(
      `parameter "storage" is ${params.storage}, but the source ${what} is on ${v.ref.storage}: a thin clone stays on its storage`,
    );
  const size = found.item.size;
  const required = Number(req.capacityRange?.requiredBytes ?? 0);
  const limit = Number(req.capacityRange?.limitBytes ?? 0);
  if (limit > 0 && limit < size)
    throw new OutOfRange(`the source ${what} has ${size} bytes, more than the limit of ${limit} bytes`);
  // Larger than the source: cloned, then grown to the size CreateVolume would give (its rounding
  // and limit), through the volume VM before it lets go of the clone (thin-copy.ts restoreCopy).
  const target = required > size ? sizeForCreate(req.capacityRange) : size;
  const zones = placementsOf(req.accessibilityRequirements)
    .map((p) => p.zone)
    .filter((z): z is string => !!z);
  if (zones.length > 0 && !zones.includes(found.node))
    throw new ResourceExhausted(
      `the source ${what} is on ${found.node}; a thin clone is made on its host, and ${zones.join(', ')} was requested (a copy to another host is not supported yet)`,
    );
  const c = copyContext(core, v.cluster, ctx);
  const made = await v.cluster.exclusive(`restore:${req.name}`, async () => {
    if (target > size)
      await guardGrowth(
        core,
        v.cluster,
        found.node,
        v.ref.storage,
        target - size,
        `CreateVolume ${req.name}`,
        ctx.signal,
      );
    return restoreCopy(c, { node: found.node, volid: v.volid, source: sourceId, name: req.name }, target);
  });
  const disk = parseVolid(made.volid)?.disk;
  if (!disk) throw new AlreadyExists(`volume ${req.name}: its volume VM ${made.vmid} holds ${made.volid}`);
  // A retry finds the volume made earlier: it must fit this request as well.
  const items = await v.cluster.api.listContent(found.node, v.ref.storage, made.vmid, { signal: ctx.signal });
  const bytes = items.find((i) => i.volid === made.volid)?.size ?? 0;
  if (bytes < target || (limit > 0 && bytes > limit))
    throw new AlreadyExists(
      `volume ${req.name} already exists as ${made.volid} with ${bytes} bytes, which does not match the requested capacity`,
    );
  return {
    volume: {
      volumeId: formatVolumeId({ region: v.cluster.region, zone: found.node, storage: v.ref.storage, disk }),
      capacityBytes: String(bytes),
      volumeContext: volumeContextOf(req.parameters),
      contentSource: src,
      accessibleTopology: [topologyOf(v.cluster.region, found.node)],
    },
  };
}

/**
 * DeleteVolume of a restored or cloned volume (`vm-<volume VM>-disk-0`): when its owner is one
 * of our volume VMs, the disk is freed (no VM may reference it, read now) and the VM destroyed.
 * Returns false when the disk's owner is no volume VM of ours (the caller's rules apply).
 */
export async function deleteRestored(core: Core, volumeId: string, ctx: T.CallContext): Promise<boolean> {
  const v = resolveVolume(core, volumeId);
  const owner = v ? diskOwner(v.ref.disk) : undefined;
  if (!v || owner === undefined || owner === core.controllerVmId) return false;
  const vm = (await v.cluster.api.vmResources({ signal: ctx.signal })).find((r) => r.vmid === owner);
  if (!vm || vm.name !== COPY_VM_NAMES.volume) return false;
  const c = copyContext(core, v.cluster, ctx);
  const found = await findVolume(v, ctx.signal);
  // Its VolumeAttributesClass markers (vm-<volume VM>-disk-0+vac…, owned by the volume VM too)
  // first: destroying the VM frees only what its config names, and a marker never outlives its disk.
  const markers = found ? markersOf(found.items, v.ref.storage, v.ref.disk) : [];
  for (const m of markers)
    await runStep(c, { op: 'free', node: vm.node, vmid: vm.vmid, storage: v.ref.storage, volid: m.volid });
  if (found) await runStep(c, { op: 'free', node: vm.node, vmid: vm.vmid, storage: v.ref.storage, volid: v.volid });
  await runStep(c, { op: 'destroy', node: vm.node, vmid: vm.vmid });
  ctx.log.info({ volid: v.volid, vmid: vm.vmid }, 'restored volume and its volume VM removed');
  return true;
}
