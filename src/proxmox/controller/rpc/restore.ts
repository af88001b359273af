// CreateVolume with a volume_content_source: a restore from a snapshot (ours, or a
// proxmox-csi-plugin copy) or a clone of a volume, both as a thin linked clone on the source's
// host (docs/snapshots.md). The new volume is `vm-<volume VM>-disk-0`: Proxmox names clones, so
// the handle records that disk, and the volume VM's record names the new volume, which makes
// a retry find it. A larger request is cloned, then grown. When the requisite topology leaves
// out the source's host, the volume VM then migrates offline with its clone to the first
// preferred requisite host that has the storage (copy/cross-zone.ts): a full copy, logged with
// its bytes and seconds.
import type * as T from '../../../csi/types.js';
import { AlreadyExists, InvalidArgument, NotFound, OutOfRange, ResourceExhausted } from '../../../errors.js';
import {
  type Core,
  capabilityProblem,
  findVolume,
  placementsOf,
  requireSnapshots,
  resolveVolume,
  topologyOf,
} from '../core.js';
import { copyView, namedHelper, restoreCopy, runStep } from '../copy/thin-copy.js';
import { restoreInto } from '../copy/cross-zone.js';
import { holdsImages, isAvailable } from '../state/cluster.js';
import { COPY_VM_NAMES, type CopyStep, helperFacts, releasedVolume } from '../safety/copy-vms.js';
import { decideCopyStep, must } from '../safety/ownership.js';
import { parseCreateParameters, sizeForCreate, volumeContextOf } from '../params/params.js';
import { guardGrowth } from './capacity-guard.js';
import { markersOf } from '../params/mutable.js';
import { diskNameFor, diskOwner, formatVolumeId, parseVolid, volidOf } from '../../volume-id.js';
import { copyContext } from './copy-context.js';
import type { Cluster } from '../state/cluster.js';

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
  await requireSnapshots(v, src?.snapshot ? 'a restore' : 'a clone', ctx.signal);
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
  const to = await targetZone(v.cluster, req.accessibilityRequirements, found.node, v.ref.storage, ctx.signal);
  const c = copyContext(core, v.cluster, ctx);
  const copy = { node: found.node, volid: v.volid, source: sourceId, name: req.name };
  const made = await v.cluster.exclusive(`restore:${req.name}`, async () => {
    await refuseOtherSource(core, v.cluster, req.name, sourceId, v.ref.storage, ctx);
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
    if (to === found.node) return { ...(await restoreCopy(c, copy, target)), node: found.node };
    // The copy on the target is full, not thin: the guard judges all of it there.
    const guard = (bytes: number) =>
      guardGrowth(core, v.cluster, to, v.ref.storage, bytes, `CreateVolume ${req.name} (copy to ${to})`, ctx.signal);
    const carried = await restoreInto(c, copy, to, target, guard);
    if (carried.copied)
      ctx.log.info(
        { name: req.name, from: found.node, to, bytes: carried.copied.bytes, seconds: carried.copied.seconds },
        `${what === 'snapshot' ? 'snapshot restored' : 'volume cloned'} into another zone: ${carried.copied.bytes} bytes copied from ${found.node} to ${to} in ${carried.copied.seconds.toFixed(1)} s (offline migration)`,
      );
    return carried;
  });
  // This process's own new VM: a plain CreateVolume of the name looks for it in the cached list.
  v.cluster.locator.invalidate();
  const disk = parseVolid(made.volid)?.disk;
  if (!disk) throw new AlreadyExists(`volume ${req.name}: its volume VM ${made.vmid} holds ${made.volid}`);
  // A retry finds the volume made earlier: it must fit this request as well.
  const items = await v.cluster.api.listContent(made.node, v.ref.storage, made.vmid, { signal: ctx.signal });
  const bytes = items.find((i) => i.volid === made.volid)?.size ?? 0;
  if (bytes < target || (limit > 0 && bytes > limit))
    throw new AlreadyExists(
      `volume ${req.name} already exists as ${made.volid} with ${bytes} bytes, which does not match the requested capacity`,
    );
  return {
    volume: {
      volumeId: formatVolumeId({ region: v.cluster.region, zone: made.node, storage: v.ref.storage, disk }),
      capacityBytes: String(bytes),
      volumeContext: volumeContextOf(req.parameters),
      contentSource: src,
      accessibleTopology: [topologyOf(v.cluster.region, made.node)],
    },
  };
}

/**
 * CSI: a name already used with another content source, or with none, is ALREADY_EXISTS — the
 * volume VM's record says which source a restore of that name was made from, and a plain
 * CreateVolume's disk `vm-<controller>-<name>` (any host of the storage) has none.
 */
async function refuseOtherSource(
  core: Core,
  cluster: Cluster,
  name: string,
  sourceId: string,
  storage: string,
  ctx: T.CallContext,
): Promise<void> {
  const c = copyContext(core, cluster, ctx);
  const prior = await namedHelper(c, await cluster.api.vmResources({ signal: ctx.signal }), 'volume', name);
  if (prior && prior.record.source !== sourceId)
    throw new AlreadyExists(`volume ${name} already exists, made from ${prior.record.source}, not from ${sourceId}`);
  const volid = volidOf(storage, diskNameFor(core.controllerVmId, name));
  for (const row of await cluster.storageRows(storage, ctx.signal)) {
    const items = await cluster.content.list(row.node, storage, core.controllerVmId, ctx.signal, false).catch(() => []);
    if (items.some((i) => i.volid === volid))
      throw new AlreadyExists(
        `volume ${name} already exists as ${volid} on ${row.node}, made without a content source`,
      );
  }
}

/**
 * Where the restore goes (CSI accessibility_requirements): the source's host when the requisite
 * topologies name it, or name no host of this region (none given: the preferred ones stand for
 * them, as for a new volume); else the first preferred topology among the requisite ones, then
 * the other requisite ones in order, whose host has the storage available. None: RESOURCE_EXHAUSTED.
 */
async function targetZone(
  cluster: Cluster,
  reqs: T.CreateVolumeRequest['accessibilityRequirements'],
  source: string,
  storage: string,
  signal: AbortSignal,
): Promise<string> {
  const zonesOf = (ts: T.Topology[] | undefined) =>
    placementsOf({ requisite: ts ?? [] })
      .filter((p) => p.zone && (p.region === undefined || p.region === cluster.region))
      .map((p) => p.zone as string);
  const preferred = zonesOf(reqs?.preferred);
  const requisite = reqs?.requisite.length ? zonesOf(reqs.requisite) : preferred;
  if (requisite.length === 0 || requisite.includes(source)) return source;
  const ordered = [...new Set([...preferred.filter((z) => requisite.includes(z)), ...requisite])];
  const rows = (await cluster.storageRows(storage, signal)).filter((r) => holdsImages(r) && isAvailable(r));
  const to = ordered.find((z) => rows.some((r) => r.node === z));
  if (!to)
    throw new ResourceExhausted(
      `the source is on ${source}, and storage "${storage}" is not available on the requested host(s) ${ordered.join(', ')} (available on: ${rows.map((r) => r.node).join(', ') || 'none'})`,
    );
  return to;
}

/**
 * DeleteVolume of a restored or cloned volume (`vm-<volume VM>-disk-N`). `false`: the disk's owner
 * is no volume VM of ours (the caller's rules apply). Otherwise the handle must be exactly the one
 * the volume VM issued (docs/ownership.md, "Ids"): its host as zone, the storage and disk its
 * released placeholder names. Any other spelling — another disk number, zone or storage, the
 * placeholder, a cross-zone restore's source zone, a volume VM still holding its clone — is
 * answered as an unknown id: nothing changes. The exact one: the gate decides on the disk's free
 * first (no VM may reference it, read now), then its markers, the disk and the VM go.
 */
export async function deleteRestored(core: Core, volumeId: string, ctx: T.CallContext): Promise<boolean> {
  const v = resolveVolume(core, volumeId);
  const owner = v ? diskOwner(v.ref.disk) : undefined;
  if (!v || owner === undefined || owner === core.controllerVmId) return false;
  const vm = (await v.cluster.api.vmResources({ signal: ctx.signal })).find((r) => r.vmid === owner);
  if (vm?.name !== COPY_VM_NAMES.volume) return false;
  const c = copyContext(core, v.cluster, ctx);
  const view = await copyView(c, vm.node);
  const f = helperFacts(view.host, vm.vmid);
  if (f?.record?.role !== 'volume' || f.record.controller !== core.controllerVmId) return false;
  const issued = releasedVolume(f);
  if (!issued || v.ref.zone !== vm.node || v.ref.storage !== issued.storage || v.ref.disk !== issued.disk) {
    ctx.log.info(
      { volumeId, vmid: vm.vmid, issued: issued ? formatVolumeId({ ...v.ref, zone: vm.node, ...issued }) : 'none yet' },
      'not the handle this volume VM issued; nothing to delete',
    );
    return true;
  }
  const found = await findVolume(v, ctx.signal);
  const free = (volid: string): CopyStep => ({
    op: 'free',
    node: vm.node,
    vmid: vm.vmid,
    storage: v.ref.storage,
    volid,
  });
  // Decide, then act: a disk still referenced (attached, say) refuses before a marker goes.
  if (found) must(decideCopyStep(free(v.volid), view));
  // Its VolumeAttributesClass markers (owned by the volume VM too) before the disk: destroying the
  // VM frees only what its config names, and a marker never outlives its disk.
  const markers = found ? markersOf(found.items, v.ref.storage, v.ref.disk) : [];
  for (const m of markers) await runStep(c, free(m.volid));
  if (found) await runStep(c, free(v.volid));
  await runStep(c, { op: 'destroy', node: vm.node, vmid: vm.vmid });
  ctx.log.info({ volid: v.volid, vmid: vm.vmid }, 'restored volume and its volume VM removed');
  return true;
}
