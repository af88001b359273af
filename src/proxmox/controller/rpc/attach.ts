// ControllerPublishVolume and ControllerUnpublishVolume: every VM config change goes through the
// cluster's per-VM attach queue. Both also remove what an interrupted offline expansion left
// attached to a helper VM (leftovers.ts), so such a leftover never blocks a volume.
import { FailedPrecondition, InvalidArgument, NotFound } from '../../../errors.js';
import { HelperLeftovers } from '../attach/attach-queue.js';
import {
  type ControllerHandler,
  capabilityProblem,
  diskFacts,
  ifOurVolume,
  isSingleNode,
  requireVolume,
} from '../core.js';
import { decideAttach, must } from '../safety/ownership.js';
import { removeHelperLeftovers, unlinkFrom } from '../safety/leftovers.js';
import { driveOptionsFromContext } from '../params/params.js';
import { publishContextForSlot } from '../../contract.js';
import { readMarkers } from './modify.js';
import { applyMutable } from '../params/mutable.js';
import { usesOf } from '../state/scan.js';

export const controllerPublishVolume: ControllerHandler<'controllerPublishVolume'> = async (core, req, ctx) => {
  const v = requireVolume(core, req.volumeId);
  const problem = capabilityProblem(req.volumeCapability ? [req.volumeCapability] : []);
  if (problem) throw new InvalidArgument(problem);
  const fromContext = driveOptionsFromContext(req.volumeContext, req.readonly);
  const { cluster, ref } = v;
  const vm = await cluster.locator.resolve(req.nodeId, ctx.signal);
  if (!vm) {
    throw new NotFound(
      `node ${req.nodeId}: no VM of that name (or proxmox://${ref.region}/<vmid>, or SMBIOS uuid) in Proxmox cluster ${ref.region}`,
    );
  }
  // The ownership gate, the disk's side: never the VM's own disk, never an orphan (the queue's
  // checks then refuse a disk any other VM config references). A refusal on the cached VM list
  // is decided again on a fresh one: the owner may be a VM made since (a restore's volume VM).
  const facts = diskFacts(core, ref);
  const onCached = decideAttach(facts, await cluster.locator.list(ctx.signal), vm);
  must(onCached.allowed ? onCached : decideAttach(facts, await cluster.locator.list(ctx.signal, true), vm));
  const rows = await cluster.storageRows(ref.storage, ctx.signal);
  const shared = rows.some((r) => r.shared);
  const exclusive = isSingleNode(req.volumeCapability);
  if (!shared && ref.zone && vm.node !== ref.zone) {
    throw new FailedPrecondition(
      `volume ${req.volumeId} lives on host ${ref.zone} but VM ${vm.name} (${vm.vmid}) runs on ${vm.node}; a local disk attaches only to VMs on its host`,
    );
  }
  // A VolumeAttributesClass change made since the volume was created overrides its context.
  let options = fromContext;
  const attach = () =>
    cluster.queues.attach(
      vm,
      {
        storage: ref.storage,
        disk: ref.disk,
        diskNode: ref.zone || vm.node,
        // A shared storage's disk can be on a VM of any host: the exclusivity checks read them all.
        holderNodes: shared ? rows.map((r) => r.node) : undefined,
        options,
        exclusive,
      },
      ctx.signal,
    );
  const slot = await cluster.exclusive(v.volid, async () => {
    // Right after a restart: a previous process's attach of this disk may still be waiting for
    // a VM lock on any host where a VM can have it (startup-fence.ts); the attach's own
    // exclusivity check then reads fresh state.
    if (exclusive && cluster.startup.open) {
      const nodes = shared ? rows.map((r) => r.node) : [ref.zone || vm.node];
      await cluster.startup.settle([vm.node, ...nodes], `publishing ${v.volid} to VM ${vm.name} (${vm.vmid})`, ctx);
    }
    const [marker] = await readMarkers(v, ref.zone || vm.node, ctx.signal, true);
    if (marker) options = applyMutable(fromContext, marker.values);
    try {
      return await attach();
    } catch (e) {
      if (!(e instanceof HelperLeftovers)) throw e;
      ctx.log.warn(
        { vms: e.vms.map((x) => x.vmid) },
        'removing helper attachments left by an interrupted offline expansion',
      );
      await unlinkFrom(cluster, e.vms, ref, ctx.signal);
      return attach();
    }
  });
  ctx.log.info({ vmid: vm.vmid, vm: vm.name, slot }, 'volume published');
  return { publishContext: publishContextForSlot(slot) };
};

export const controllerUnpublishVolume: ControllerHandler<'controllerUnpublishVolume'> = async (core, req, ctx) => {
  return ifOurVolume(core, req.volumeId, ctx, 'detach', async (v) => {
    const { cluster, ref } = v;
    const disk = { storage: ref.storage, disk: ref.disk };
    if (req.nodeId) {
      const vm = await cluster.locator.resolve(req.nodeId, ctx.signal);
      if (!vm) {
        ctx.log.info({ nodeId: req.nodeId }, 'no such VM; the volume cannot be attached to it');
        return {};
      }
      // What was asked decides the answer; a helper leftover elsewhere is removed on the side,
      // and if that fails, the next publish, expansion or delete of the volume removes it. The
      // side search takes the other VMs' entries as the disk index has them, whatever their age
      // (a VM never read is read): those paths read fresh before they decide, so an unpublish
      // does not wait for re-reads it does not need (docs/performance.md, reads per RPC).
      await Promise.all([
        cluster.queues.detach(vm, disk, ctx.signal),
        removeHelperLeftovers(cluster, ref, {
          log: ctx.log,
          signal: ctx.signal,
          exclude: [vm.vmid],
          maxAgeMs: Number.POSITIVE_INFINITY,
        }).catch((e: unknown) => {
          ctx.log.warn(
            { err: (e as Error).message },
            'could not remove a helper attachment left by an interrupted offline expansion',
          );
        }),
      ]);
      return {};
    }
    // No node given: detach from every VM that has it, helper attachments included. A change
    // that may still land would escape the scan: refuse until it has settled.
    cluster.fences.check(v.volid, `unpublishing ${v.volid} from every VM`);
    const scan = await cluster.index.scan({ signal: ctx.signal, nodes: ref.zone ? [ref.zone] : undefined });
    const use = usesOf(scan, ref.storage, ref.disk);
    const vms = new Map(
      [...use.sites, ...use.unused].map((u) => [u.vm.vmid, { vmid: u.vm.vmid, node: u.vm.node, name: u.vm.name }]),
    );
    for (const vm of vms.values()) await cluster.queues.detach(vm, disk, ctx.signal);
    return {};
  });
};
