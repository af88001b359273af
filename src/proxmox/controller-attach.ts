// ControllerPublishVolume, ControllerUnpublishVolume and ControllerExpandVolume: everything
// that changes a VM's config goes through the cluster's per-VM attach queue, except resize,
// which Proxmox does under the same VM lock and which is retried when that lock is busy.
import type * as T from '../csi/types.js';
import type { CallContext } from '../csi/types.js';
import { Busy, FailedPrecondition, InvalidArgument, NotFound } from '../errors.js';
import { type Core, capabilityProblem, findVolume, isSingleNode, requireVolume, resolveVolume } from './core.js';
import { outcomeUncertain } from './errors.js';
import { MiB, driveOptionsFromContext, publishContextForSlot, sizeForExpand } from './params.js';
import { scanVms, usesOf } from './scan.js';
import { retryBusy, sleep, waitTask } from './tasks.js';

export async function controllerPublishVolume(core: Core, req: T.ControllerPublishVolumeRequest, ctx: CallContext): Promise<T.ControllerPublishVolumeResponse> {
  const v = requireVolume(core, req.volumeId);
  const problem = capabilityProblem(req.volumeCapability ? [req.volumeCapability] : []);
  if (problem) throw new InvalidArgument(problem);
  const options = driveOptionsFromContext(req.volumeContext ?? {}, req.readonly === true);
  const { cluster, ref } = v;
  const vm = await cluster.locator.resolve(req.nodeId, ctx.signal);
  if (!vm) {
    throw new NotFound(`node ${req.nodeId}: no VM of that name (or proxmox://${ref.region}/<vmid>, or SMBIOS uuid) in Proxmox cluster ${ref.region}`);
  }
  const rows = await cluster.storageRows(ref.storage, ctx.signal);
  const shared = rows.some((r) => r.shared);
  if (!shared && ref.zone && vm.node !== ref.zone) {
    throw new FailedPrecondition(`volume ${req.volumeId} lives on host ${ref.zone} but VM ${vm.name} (${vm.vmid}) runs on ${vm.node}; a local disk attaches only to VMs on its host`);
  }
  const slot = await cluster.queues.attach(vm, {
    storage: ref.storage,
    disk: ref.disk,
    diskNode: ref.zone || vm.node,
    options,
    exclusive: isSingleNode(req.volumeCapability),
  }, ctx.signal);
  ctx.log.info({ vmid: vm.vmid, vm: vm.name, slot }, 'volume published');
  return { publishContext: publishContextForSlot(slot) };
}

export async function controllerUnpublishVolume(core: Core, req: T.ControllerUnpublishVolumeRequest, ctx: CallContext): Promise<T.ControllerUnpublishVolumeResponse> {
  const v = resolveVolume(core, req.volumeId);
  if (!v) {
    ctx.log.info('volume handle is not one of ours or names an unknown region; nothing to detach');
    return {};
  }
  const { cluster, ref } = v;
  const disk = { storage: ref.storage, disk: ref.disk };
  if (req.nodeId) {
    const vm = await cluster.locator.resolve(req.nodeId, ctx.signal);
    if (!vm) {
      ctx.log.info({ nodeId: req.nodeId }, 'no such VM; the volume cannot be attached to it');
      return {};
    }
    await cluster.queues.detach(vm, disk, ctx.signal);
    return {};
  }
  // No node given: detach from every VM that has it.
  const scan = await scanVms(cluster.api, cluster.locator, { signal: ctx.signal, nodes: ref.zone ? [ref.zone] : undefined });
  const use = usesOf(scan, ref.storage, ref.disk);
  const vms = new Map([...use.sites, ...use.unused].map((u) => [u.vm.vmid, { vmid: u.vm.vmid, node: u.vm.node, name: u.vm.name }]));
  for (const vm of vms.values()) await cluster.queues.detach(vm, disk, ctx.signal);
  return {};
}

export async function controllerExpandVolume(core: Core, req: T.ControllerExpandVolumeRequest, ctx: CallContext): Promise<T.ControllerExpandVolumeResponse> {
  const v = requireVolume(core, req.volumeId);
  const size = sizeForExpand(req.capacityRange);
  const nodeExpansionRequired = !req.volumeCapability?.block;
  const { cluster, ref, volid } = v;
  const found = await findVolume(v, ctx.signal);
  if (!found) throw new NotFound(`volume ${req.volumeId} does not exist`);
  if (found.item.size >= size) return { capacityBytes: String(found.item.size), nodeExpansionRequired };

  const scan = await scanVms(cluster.api, cluster.locator, { signal: ctx.signal, nodes: [found.node] });
  const sites = usesOf(scan, ref.storage, ref.disk).sites;
  const at = sites.find((s) => s.site.placement === 'attached');
  if (!at) {
    if (sites.length > 0) throw new Busy(`volume ${req.volumeId} has a pending change on VM ${sites[0]!.vm.name} (${sites[0]!.vm.vmid}); retry when it settles`);
    // Proxmox VE resizes a disk only through a VM that has it (PUT …/qemu/{vmid}/resize);
    // storage content has no resize. The resizer retries and succeeds once a pod uses it.
    throw new FailedPrecondition(`volume ${req.volumeId} is not attached to any VM; Proxmox resizes disks only through the VM using them, so this driver expands volumes online (while a pod uses the volume)`);
  }
  const vm = at.vm;
  const target = `${Math.ceil(size / MiB)}M`;
  const reached = async () => ((await findVolume(v, ctx.signal))?.item.size ?? 0) >= size;
  await retryBusy(async () => {
    try {
      const upid = await cluster.api.resizeDisk(vm.node, vm.vmid, at.site.key, target, { signal: ctx.signal });
      if (upid) await waitTask(cluster.api, vm.node, upid, { cluster: cluster.region, what: `resize ${volid} on VM ${vm.vmid}`, signal: ctx.signal });
    } catch (e) {
      if (!outcomeUncertain(e) || !(await reached())) throw e;
    }
  }, { signal: ctx.signal });
  // The storage may report the new size a moment after the task ends.
  for (let i = 0; i < 10 && !(await reached()); i++) await sleep(100 * (i + 1), ctx.signal);
  ctx.log.info({ volid, vmid: vm.vmid, key: at.site.key, size }, 'volume expanded online');
  return { capacityBytes: String(size), nodeExpansionRequired };
}
