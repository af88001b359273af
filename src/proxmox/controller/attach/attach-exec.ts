// The attach queue's executor: sends what a plan (attach-plan.ts) decided to one VM and waits for
// its outcome. One unlink (PUT …/unlink) or one config change (POST …/config) with the digest of
// the read the plan came from, so a config another writer changed since is refused, never
// overwritten; then the change's task. Nothing here decides or retries: attach-queue.ts reads
// back and asks the planner again.
import type { ConfigChange, ProxmoxApi, TaskListItem } from '../../api/api.js';
import { taskError } from '../../api/errors.js';
import { waitTask } from '../../api/tasks.js';
import { what } from './attach-plan.js';
import type { DiskIndex } from '../state/disk-index.js';
import type { VmRef } from '../state/vm-locator.js';

/** What a landed change's task told: the node's config tasks of this token, listed after it. */
export interface Landed {
  node: string;
  tasks: TaskListItem[];
}

export interface ExecOptions {
  api: ProxmoxApi;
  cluster: string;
  index: DiskIndex;
  taskTimeoutMs?: number | undefined;
  /** How far back the task list is read (the disk index's TTL). */
  maxAgeMs: number;
}

export class ConfigExecutor {
  constructor(private readonly o: ExecOptions) {}

  /** Unlinks the keys (synchronous in qemu-server: no task). */
  unlink(vm: VmRef, keys: string[], digest: string | undefined): Promise<void> {
    return this.o.api.unlinkDisks(vm.node, vm.vmid, keys, { digest });
  }

  /**
   * Sends one config change and waits for its task; undefined when Proxmox answered without a
   * task. `list`: read the host's task list for the exclusivity re-check (returned as `landed`).
   */
  async change(
    vm: VmRef,
    change: ConfigChange,
    whatFor: string,
    list: boolean,
  ): Promise<{ landed: Landed | undefined } | undefined> {
    const upid = await this.o.api.updateVmConfig(vm.node, vm.vmid, change);
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
