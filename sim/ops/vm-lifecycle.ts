// Creating and destroying a VM (qemu-server create_vm / destroy_vm), as far as a stopped VM
// without new disks goes: the CSI helper VM that carries a disk through an offline migration.

import { fail } from '../http/errors.js';
import { parseVolid, volumeOwner } from '../model/drive.js';
import type { VmModel } from '../model/types.js';
import type { TaskLog } from '../tasks.js';
import { type SimContext, findVolume, getNode, getStorage, loadVm } from './context.js';
import { referencedVolumes } from './migrate.js';
import { freeVolume } from './storage.js';

/**
 * create_and_lock_config, run before the worker forks: the VMID must be unused cluster-wide
 * (PVE::Cluster::check_vmid_unused). The config exists from here on with `lock: create`.
 */
export function createLockedVm(ctx: SimContext, node: string, vmid: number): VmModel {
  getNode(ctx, node);
  const other = ctx.state.vms.get(vmid);
  if (other) throw fail(`unable to create VM ${vmid} - VM ${vmid} already exists on node '${other.node}'`);
  const vm: VmModel = {
    vmid,
    node,
    status: 'stopped',
    config: new Map([['lock', 'create']]),
    pending: new Map(),
    pendingDelete: new Map(),
    snapshots: new Map(),
    startedAt: 0,
    pid: 0,
  };
  const unseen = ctx.faults.get().statusPassReads;
  if (unseen > 0) vm.unseenReads = unseen;
  ctx.state.vms.set(vmid, vm);
  return vm;
}

/**
 * The qmcreate worker for options without disk allocation: unusedN must name an existing volume
 * on this node; a failure removes the config again (as the worker unlinks it).
 */
export function finishCreate(ctx: SimContext, vm: VmModel, settings: Map<string, string>): void {
  try {
    for (const [k, v] of settings) {
      if (/^unused\d+$/.test(k)) {
        const ref = parseVolid(v);
        if (!ref) throw fail(`unable to parse volume ID '${v}'`);
        getStorage(ctx, vm.node, ref.storage);
        if (!findVolume(ctx, vm.node, v)) throw fail(`volume '${v}' does not exist`);
      }
    }
    for (const [k, v] of settings) vm.config.set(k, v);
    if (!vm.config.has('smbios1')) vm.config.set('smbios1', `uuid=${crypto.randomUUID()}`);
    vm.config.delete('lock');
  } catch (e) {
    ctx.state.vms.delete(vm.vmid);
    throw e;
  }
}

/** The checks destroy_vm's API runs before forking and again under the config lock. */
export function destroyEarlyChecks(ctx: SimContext, node: string, vmid: number): VmModel {
  const vm = loadVm(ctx, node, vmid);
  if (vm.config.get('protection') === '1') throw fail(`can't remove VM ${vmid} - protection mode enabled`);
  if (vm.status === 'running') throw fail(`VM ${vmid} is running - destroy failed`);
  return vm;
}

/**
 * PVE::QemuServer::destroy_vm: frees the volumes the config references that this VM owns (a
 * foreign one is left alone), and with `destroy-unreferenced-disks` every other volume named
 * after the VMID on the node's storages; then the config goes.
 */
export async function destroyVm(ctx: SimContext, vm: VmModel, purgeUnreferenced: boolean, log: TaskLog): Promise<void> {
  const lock = vm.config.get('lock');
  if (lock) throw fail(`VM is locked (${lock})`);
  for (const volid of referencedVolumes(vm).keys()) {
    const ref = parseVolid(volid);
    if (!ref || volumeOwner(ref.volname) !== vm.vmid) continue;
    try {
      await freeVolume(ctx, vm.node, ref.storage, ref.volname, log);
    } catch (e) {
      log.warn(`Could not remove disk '${volid}', check manually: ${(e as Error).message.replace(/\n$/, '')}`);
    }
  }
  if (purgeUnreferenced) {
    for (const st of getNode(ctx, vm.node).storages.values()) {
      for (const v of [...st.volumes.values()]) {
        if (v.ownerVmid === vm.vmid) await freeVolume(ctx, vm.node, st.id, v.volname, log);
      }
    }
  }
  ctx.state.vms.delete(vm.vmid);
}
