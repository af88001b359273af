// ControllerExpandVolume. Proxmox VE resizes a disk only through a VM whose config holds it
// (PUT /nodes/{node}/qemu/{vmid}/resize); storage content has no resize call. So:
// - online: a volume attached to a VM is resized through that VM;
// - offline (always on): an unattached volume is attached for a moment to a helper VM on its own
//   host, resized there, and unlinked again. A stopped VM is preferred, because a config change
//   on a stopped VM touches no guest; else a running one, whose guest sees an extra disk for a
//   few seconds under a WWN no node plugin claims (Talos ignores it). The attachment goes
//   through that VM's attach queue, so it never races a real publish for a slot; it carries the
//   helper WWN (params.ts) and backup=0, so a crash between attach and unlink leaves something
//   the next call recognises and removes (leftovers.ts).
// Filesystem volumes still need the node to grow the filesystem (node_expansion_required).
import type { CallContext } from '../../../csi/types.js';
import { Busy, CsiError, FailedPrecondition, isCsiError } from '../../../errors.js';
import type { ConfigEntry, VmResource } from '../../api/api.js';
import {
  type ControllerHandler,
  type Core,
  type ResolvedVolume,
  diskFacts,
  findVolume,
  foundVolume,
  requireVolume,
} from '../core.js';
import { sitesOf } from '../state/drives.js';
import { digestRefused, outcomeUncertain } from '../../api/errors.js';
import { unlinkFrom } from '../safety/leftovers.js';
import { decideGrow, describeRef, must, permitResize } from '../safety/ownership.js';
import { readFresh } from '../safety/fresh-read.js';
import { HELPER_DRIVE_OPTIONS, MiB, sizeForExpand } from '../params/params.js';
import { retryBusy, sleep, waitTask } from '../../api/tasks.js';
import { untilAborted } from '../safety/fences.js';
import type { VmRef } from '../state/vm-locator.js';
import { diskOwner } from '../../volume-id.js';
import { COPY_VM_NAMES } from '../safety/copy-vms.js';
import { MOVER_VM_NAME } from '../safety/ownership-day2.js';
import type { FreshView } from '../safety/ownership.js';
import { guardGrowth } from './capacity-guard.js';

/** Helper VMs tried per expansion before giving up (each may be full, locked or refuse hot-plug). */
const MAX_HELPERS = 3;
/** Failures on one helper VM that another VM may not have. */
const TRY_NEXT = new Set(['ResourceExhausted', 'Unavailable', 'Aborted', 'NotFound']);
const HELPER_VM_NAMES: ReadonlySet<string> = new Set([...Object.values(COPY_VM_NAMES), MOVER_VM_NAME]);

export const controllerExpandVolume: ControllerHandler<'controllerExpandVolume'> = async (core, req, ctx) => {
  const v = requireVolume(core, req.volumeId);
  const size = sizeForExpand(req.capacityRange);
  const nodeExpansionRequired = !req.volumeCapability?.block;
  const { cluster, ref, volid } = v;
  return cluster.exclusive(volid, async () => {
    cluster.fences.check(volid, `expanding ${volid}`);
    // Right after a restart: a previous process's attach of this disk may still be waiting for a
    // VM lock, in no config and no pending section yet (startup-fence.ts). The scan below decides
    // online, offline or refused on what it sees, so it must not run before such a change landed
    // or failed: an offline expansion would put the disk on a helper VM while the attach lands,
    // and grow it where that VM's guest is never told.
    if (cluster.startup.open) {
      const nodes = ref.zone ? [ref.zone] : (await cluster.storageRows(ref.storage, ctx.signal)).map((r) => r.node);
      await cluster.startup.settle(nodes, `expanding ${volid}`, ctx);
    }
    // A shared storage's disk may sit on a VM of any node: look at all of them. The ownership
    // gate decides on a read taken now (fresh-read.ts): online, offline, or refused.
    const [found, view] = await Promise.all([
      foundVolume(v, req.volumeId, ctx.signal),
      readFresh(cluster, ref.zone ? [ref.zone] : undefined, ctx.signal),
    ]);
    const plan = must(decideGrow(diskFacts(core, ref), view));
    // Also on the no-op path: a retry after a failed unlink must not leave the helper behind.
    if (plan.mode !== 'settling' && plan.helperHolders.length) {
      ctx.log.warn(
        { disk: volid, vms: plan.helperHolders.map((h) => h.vmid) },
        'removing helper attachments left by an interrupted offline expansion',
      );
      await unlinkFrom(cluster, plan.helperHolders, ref, ctx.signal);
    }
    if (found.item.size >= size) return { capacityBytes: String(found.item.size), nodeExpansionRequired };
    if (plan.mode === 'settling') {
      throw new Busy(`volume ${req.volumeId} is ${describeRef(plan.ref)}; retry when that change settles`);
    }
    const growth = size - found.item.size;
    await guardGrowth(core, cluster, found.node, ref.storage, growth, `ControllerExpandVolume ${volid}`, ctx.signal);
    if (plan.mode === 'online') {
      const read = view.entries.find((s) => s.vm.vmid === plan.vm.vmid)?.entries;
      await resizeThrough(core, v, plan.vm, size, ctx.signal, view, read);
      ctx.log.info({ volid, vmid: plan.vm.vmid, size }, 'volume expanded online');
    } else {
      const allowed = await core.helperVms?.get(cluster.region)?.(ctx.signal);
      await expandOffline(core, v, { node: found.node, size, view }, ctx, allowed);
    }
    return { capacityBytes: String(size), nodeExpansionRequired };
  });
};

/**
 * Resizes through a VM that has the disk attached; the task must end OK (`owners`: the read the
 * gate's grow decision was taken on, which says whose a restored volume is). Each resize carries the
 * digest of the config read it was planned on (`read`: the scan's entries of that VM, else a read
 * now), so a slot that another writer gave to another disk in between is never resized: Proxmox
 * refuses (`checksum mismatch`, the task's exit status), the VM is read again and the resize
 * goes to where the disk is now. A disk no longer attached there ends the expansion with ABORTED.
 */
async function resizeThrough(
  core: Core,
  v: ResolvedVolume,
  vm: VmRef,
  size: number,
  signal: AbortSignal,
  owners: FreshView,
  read?: readonly ConfigEntry[],
): Promise<void> {
  const { cluster } = v;
  const target = `${Math.ceil(size / MiB)}M`;
  const reached = async (s?: AbortSignal) => ((await findVolume(v, s))?.item.size ?? 0) >= size;
  let planned = read;
  // The resize task runs to its outcome even when the caller gives up; the volume stays fenced
  // until then (fences.ts). A caller's abort stops only the retries that were not sent yet.
  const gone = await retryBusy(
    async () => {
      const entries = planned ?? (await cluster.index.read(vm, signal)) ?? [];
      planned = undefined;
      const key = sitesOf(entries, v.ref.storage, v.ref.disk).find((s) => s.placement === 'attached')?.key;
      if (!key) return true;
      const digest = entries.find((e) => e.key === 'digest')?.value || undefined;
      // The gate: that key must be the driver's drive line of this disk in the read the digest is of.
      const permit = must(permitResize(diskFacts(core, v.ref), vm, entries, key, target, digest, owners));
      await cluster.fences.run(
        v.volid,
        'resize',
        vm,
        async () => {
          try {
            const upid = await cluster.port.resizeDisk(permit);
            if (upid)
              await waitTask(cluster.api, vm.node, upid, {
                cluster: cluster.region,
                what: `resize ${v.volid} on VM ${vm.vmid}`,
              });
          } catch (e) {
            // Refused for the digest: nothing was done; read again (retryBusy: it is ABORTED).
            if (digestRefused(e) || !outcomeUncertain(e) || !(await reached())) throw e;
          }
        },
        signal,
      );
      return false;
    },
    { signal },
  );
  if (gone) {
    throw new Busy(
      `expanding ${v.volid}: it is no longer attached to VM ${vm.name} (${vm.vmid}); that VM's config changed since it was read (another writer detached it); retry`,
    );
  }
  // The storage may report the new size a moment after the task ends.
  for (let i = 0; i < 10 && !(await reached()); i++) await sleep(100 * (i + 1), signal);
}

/**
 * The cluster's own node VMs on the disk's host (`allowed` names; all when undefined): stopped
 * ones first (no guest sees anything), then running ones; lowest VMID first within each.
 */
export function helperCandidates(
  vms: readonly VmResource[],
  node: string,
  owner: number | undefined,
  allowed?: ReadonlySet<string>,
): VmRef[] {
  const stopped = (vm: VmResource) => (vm.status === 'stopped' ? 0 : 1);
  return (
    vms
      // Never the disk's owner: unlinking would turn the disk into an unusedN entry of its owner,
      // and deleting that entry frees the disk. Never one of the driver's own helper VMs (copy,
      // snapshot, volume, mover): each step on them requires them to hold exactly their disk.
      .filter(
        (vm) =>
          vm.node === node && vm.vmid !== owner && !HELPER_VM_NAMES.has(vm.name) && (!allowed || allowed.has(vm.name)),
      )
      .sort((a, b) => stopped(a) - stopped(b) || a.vmid - b.vmid)
      .map((vm) => ({ vmid: vm.vmid, node: vm.node, name: vm.name }))
  );
}

async function expandOffline(
  core: Core,
  v: ResolvedVolume,
  at: { node: string; size: number; view: FreshView },
  ctx: CallContext,
  allowed?: ReadonlySet<string>,
): Promise<void> {
  const { ref, volid, cluster } = v;
  const { node, size } = at;
  const disk = { storage: ref.storage, disk: ref.disk };
  // From the fresh read the decision was made on; never a template.
  const vms = at.view.vms.filter((vm) => !vm.template);
  const candidates = helperCandidates(vms, node, diskOwner(ref.disk), allowed);
  if (candidates.length === 0 && allowed) {
    throw new FailedPrecondition(
      `volume ${volid} on ${node} is attached to no VM, and host ${node} runs none of the cluster's node VMs ` +
        `(${[...allowed].sort().join(', ') || 'none known'}) to resize it through (Proxmox VE resizes a disk only via a VM ` +
        `that has it; other VMs are never borrowed): expand the volume while a pod on ${node} uses it, or list a VM on ` +
        `${node} under expansion_helpers in the Proxmox config`,
    );
  }
  if (candidates.length === 0) {
    throw new FailedPrecondition(
      `volume ${volid} on ${node} is attached to no VM, and host ${node} has no VM to resize it through ` +
        `(Proxmox VE resizes a disk only via PUT /nodes/{node}/qemu/{vmid}/resize of a VM that has it): ` +
        `create a VM on ${node} (a stopped one will do), or expand the volume while a pod on ${node} uses it`,
    );
  }
  const failures: string[] = [];
  let last: unknown;
  for (const vm of candidates.slice(0, MAX_HELPERS)) {
    let slot: number;
    try {
      slot = await cluster.queues.attach(
        vm,
        { ...disk, diskNode: node, options: HELPER_DRIVE_OPTIONS, exclusive: false, helper: true },
        ctx.signal,
      );
    } catch (e) {
      last = e;
      failures.push(`VM ${vm.name} (${vm.vmid}): ${(e as Error).message}`);
      // The attach may have half-happened (a pending hot-plug): take it back before moving on.
      // A caller that gave up does not wait for it: the detach is fenced and runs on its own.
      await untilAborted(cluster.queues.detach(vm, disk), ctx.signal).catch((err: unknown) =>
        ctx.log.warn(
          { vmid: vm.vmid, err: (err as Error).message },
          'could not remove a failed helper attachment; the next call will',
        ),
      );
      if (ctx.signal.aborted || !isCsiError(e) || !TRY_NEXT.has(e.kind)) throw e;
      continue;
    }
    ctx.log.info({ volid, vmid: vm.vmid, vm: vm.name, slot }, 'attached to a helper VM for an offline expansion');
    let resizeErr: Error | undefined;
    // The attach changed the helper's config: its digest comes from a read after it.
    await resizeThrough(core, v, vm, size, ctx.signal, at.view).catch(
      (e: unknown) => (resizeErr = e instanceof Error ? e : new Error(`resize failed: ${String(e)}`)),
    );
    try {
      // No signal: the unlink must happen even when the caller has given up.
      // (untilAborted: a caller that gave up does not wait; the detach stays fenced.)
      await untilAborted(cluster.queues.detach(vm, disk), ctx.signal);
    } catch (e) {
      if (!resizeErr) throw e;
      ctx.log.warn(
        { vmid: vm.vmid, err: (e as Error).message },
        'could not remove the helper attachment after a failed resize; the next call will',
      );
    }
    if (resizeErr) throw resizeErr;
    ctx.log.info({ volid, vmid: vm.vmid, size }, 'volume expanded offline');
    return;
  }
  const kind = isCsiError(last) ? last.kind : 'Unavailable';
  throw new CsiError(
    kind,
    `volume ${volid}: could not attach it to a helper VM on ${node} to resize it: ${failures.join('; ')}`,
    { cause: last },
  );
}
