// The attach queue's executor: sends what a plan (attach-plan.ts) decided to one VM and waits for
// its outcome. One unlink (PUT …/unlink) or one config change (POST …/config) with the digest of
// the read the plan came from, so a config another writer changed since is refused, never
// overwritten; then the change's task. Nothing here decides or retries: attach-queue.ts reads
// back and asks the planner again.
import type { ConfigChange, ConfigEntry, ProxmoxReadApi, TaskListItem } from '../../api/api.js';
import { taskError } from '../../api/errors.js';
import { waitTask } from '../../api/tasks.js';
import { what } from './attach-plan.js';
import type { DiskIndex } from '../state/disk-index.js';
import {
  type VmRunState,
  changedKeys,
  foreignPendingKeys,
  must,
  permitConfigChange,
  permitUnlink,
} from '../safety/ownership.js';
import type { OwnershipPort } from '../safety/ownership-port.js';
import type { VmRef } from '../state/vm-locator.js';

/** What a landed change's task told: the node's config tasks of this token, listed after it. */
export interface Landed {
  node: string;
  tasks: TaskListItem[];
}

export interface ExecOptions {
  api: ProxmoxReadApi;
  /** The only way to send a change: each one carries the ownership gate's permit. */
  port: OwnershipPort;
  cluster: string;
  index: DiskIndex;
  taskTimeoutMs?: number | undefined;
  /** How far back the task list is read (the disk index's TTL). */
  maxAgeMs: number;
}

export class ConfigExecutor {
  constructor(private readonly o: ExecOptions) {}

  /**
   * Unlinks the keys (synchronous in qemu-server: no task), once the ownership gate found each
   * one a drive line of the driver in `entries`, the read whose digest goes with it.
   */
  async unlink(vm: VmRef, keys: string[], entries: readonly ConfigEntry[], digest: string | undefined): Promise<void> {
    const state = await this.runState(vm, entries, keys);
    await this.o.port.unlinkDisks(must(permitUnlink(vm, entries, keys, digest, state)));
  }

  /**
   * Whether the VM runs, read now, only when it has pending changes of others: the gate refuses
   * to change a stopped VM then (ownership.ts foreignPendingKeys), and needs a fresh answer.
   */
  private async runState(
    vm: VmRef,
    entries: readonly ConfigEntry[],
    touched: readonly string[],
  ): Promise<VmRunState | undefined> {
    if (foreignPendingKeys(entries, touched).length === 0) return undefined;
    const now = (await this.o.api.vmResources()).find((r) => r.vmid === vm.vmid && r.type === 'qemu');
    return { running: now?.status === 'running' };
  }

  /**
   * Sends one config change (planned on `entries`) and waits for its task; undefined when Proxmox answered without a
   * task. `list`: read the host's task list for the exclusivity re-check (returned as `landed`).
   */
  async change(
    vm: VmRef,
    entries: readonly ConfigEntry[],
    change: ConfigChange,
    whatFor: string,
    list: boolean,
  ): Promise<{ landed: Landed | undefined } | undefined> {
    // Planned on `entries` (whose digest the change carries): the gate checks every key it touches.
    const state = await this.runState(vm, entries, changedKeys(change));
    const upid = await this.o.port.updateVmConfig(must(permitConfigChange(vm, entries, change, state)));
    if (!upid) return undefined;
    this.o.index.mine(upid);
    return { landed: await this.finish(vm, upid, whatFor, list) };
  }

  /**
   * Waits for a config task. The first look is the host's task list (right after the POST):
   * it carries this task's status and, for the exclusivity re-check, every other instance's
   * config task; a task still running is then polled with backoff.
   */
  private async finish(vm: VmRef, upid: string, whatFor: string, list: boolean): Promise<Landed | undefined> {
    const opts = { cluster: this.o.cluster, what: `${whatFor} ${what(vm)}`, timeoutMs: this.o.taskTimeoutMs };
    if (!list) {
      await waitTask(this.o.api, vm.node, upid, opts);
      return undefined;
    }
    const tasks = await this.o.index.tasks(vm.node, Date.now() - this.o.maxAgeMs);
    const mine = tasks.find((t) => t.upid === upid);
    const exit = mine && mine.status !== 'RUNNING' && mine.endtime !== undefined ? (mine.status ?? '') : undefined;
    if (exit === undefined) await waitTask(this.o.api, vm.node, upid, opts);
    else if (!(exit === 'OK' || /^WARNINGS?: \d+$/.test(exit))) throw taskError(exit || 'unknown error', opts);
    return { node: vm.node, tasks };
  }
}
