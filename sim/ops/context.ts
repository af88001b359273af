// What every operation needs, and the lookups whose failures have fixed PVE messages.

import type { DiskBackend } from '../backend/types.js';
import type { FaultState } from '../faults.js';
import { fail } from '../http/errors.js';
import { type KeyedLocks, lockKey, storageLockFile, vmLockFile } from '../locks.js';
import type { ClusterState, NodeModel, StorageModel, VmModel, VolumeModel } from '../model/types.js';
import { configFilePath } from '../model/vmconfig.js';
import type { TaskRegistry } from '../tasks.js';
import type { VmRef } from '../backend/types.js';

export interface SimContext {
  state: ClusterState;
  locks: KeyedLocks;
  tasks: TaskRegistry;
  faults: FaultState;
  backend: DiskBackend;
  nowSec(): number;
}

export function getNode(ctx: SimContext, name: string): NodeModel {
  const node = ctx.state.nodes.get(name);
  if (!node) {
    throw fail(`hostname lookup '${name}' failed - failed to get address info for: ${name}: Name or service not known`);
  }
  return node;
}

export function getStorage(ctx: SimContext, node: string, storage: string): StorageModel {
  const n = getNode(ctx, node);
  const st = n.storages.get(storage);
  if (!st) {
    const elsewhere = [...ctx.state.nodes.values()].some((x) => x.storages.has(storage));
    throw fail(
      elsewhere ? `storage '${storage}' is not available on node '${node}'` : `storage '${storage}' does not exist`,
    );
  }
  return st;
}

/** PVE::QemuConfig->load_config on the node named in the URL. */
export function loadVm(ctx: SimContext, node: string, vmid: number): VmModel {
  getNode(ctx, node);
  const vm = ctx.state.vms.get(vmid);
  if (!vm || vm.node !== node) throw fail(`Configuration file '${configFilePath(node, vmid)}' does not exist`);
  return vm;
}

export function vmRef(vm: VmModel): VmRef {
  return { vmid: vm.vmid, node: vm.node, name: vm.config.get('name') ?? `VM${vm.vmid}` };
}

export function findVolume(ctx: SimContext, node: string, volid: string): VolumeModel | undefined {
  const i = volid.indexOf(':');
  if (i < 0) return undefined;
  return ctx.state.nodes
    .get(node)
    ?.storages.get(volid.slice(0, i))
    ?.volumes.get(volid.slice(i + 1));
}

export function withVmLock<T>(ctx: SimContext, vm: VmModel, fn: () => Promise<T>): Promise<T> {
  const f = ctx.faults.get();
  const file = vmLockFile(vm.vmid);
  return ctx.locks.withLock(lockKey(vm.node, file), file, f.lockTimeoutMs, f.lockHoldMs, fn);
}

export function withStorageLock<T>(ctx: SimContext, node: string, storage: string, fn: () => Promise<T>): Promise<T> {
  const f = ctx.faults.get();
  const file = storageLockFile(storage);
  return ctx.locks.withLock(lockKey(node, file), file, f.lockTimeoutMs, f.lockHoldMs, fn);
}
