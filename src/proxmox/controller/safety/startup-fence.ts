// The start-up fence: the crash window fences.ts cannot close. A fence lives in the process that
// sent the change; after kill -9 it is gone, but a `POST …/config` the dead process sent can
// still be waiting in Proxmox: qemu-server forks the `qmconfig` worker first and takes the VM
// config lock inside it, waiting up to 10 s. Until it has the lock its change is in no config and
// no pending section, so the exclusivity check of a fresh process cannot see it, and the change
// can land after that process published the same single-writer disk to another VM.
// What Proxmox does show is the task: a running `qmconfig` task in the node's active task list
// (GET /nodes/{node}/tasks?source=active), owned by the token or user that sent it. So for a
// short window after start, an exclusive publish and an expansion (expand.ts: online, offline
// or refused is decided on where the disk is) first wait for such tasks of our own identity
// that this process did not start, on every node where a VM could receive the disk. After the
// window it costs nothing: a change sent before this process started has taken the lock by then
// (its change is written to the pending section first, where the exclusivity check reads it)
// or it has failed.
import type { Logger } from 'pino';
import { Busy } from '../../../errors.js';
import type { ActiveTask, ProxmoxReadApi } from '../../api/api.js';
import { sleep } from '../../api/tasks.js';

/**
 * How long after start a change sent by a previous process may still be invisible: Proxmox's VM
 * config lock wait (PVE::AbstractConfig::lock_config, 10 s) plus 2 s for the request to reach
 * pvedaemon and fork its worker. The same bound, counted from when this process first saw a
 * task running, ends the wait for that task.
 */
export const STARTUP_FENCE_MS = 12_000;

/** An ABORTED answer must reach the caller before its deadline, not after. */
const ANSWER_MARGIN_MS = 300;

export interface StartupFenceOptions {
  cluster: string;
  /** The Proxmox identity this driver uses (`user@realm!token` or `user@realm`); unset: any. */
  identity?: string;
  log: Logger;
  /** Default STARTUP_FENCE_MS; tests shorten it. */
  windowMs?: number;
}

export class StartupFence {
  private readonly until: number;
  private readonly windowMs: number;
  /** UPIDs of the config changes this process started. */
  private readonly own = new Set<string>();

  constructor(
    private readonly api: ProxmoxReadApi,
    private readonly o: StartupFenceOptions,
  ) {
    this.windowMs = o.windowMs ?? STARTUP_FENCE_MS;
    this.until = Date.now() + this.windowMs;
  }

  /** Whether an exclusive publish or an expansion must still look for a previous process's changes. */
  get open(): boolean {
    return Date.now() < this.until;
  }

  /** A `POST …/config` task this process started (ownership-port.ts reports each one). */
  noteOwn(upid: string): void {
    if (Date.now() < this.until) this.own.add(upid);
  }

  /**
   * Inside the window: waits until no `qmconfig` task of ours that this process did not start
   * runs on `nodes` (or until it has had its lock wait since first seen). Refuses with ABORTED
   * naming the task when the caller's deadline comes first. After the window: no call at all.
   */
  async settle(
    nodes: readonly string[],
    what: string,
    o: { signal?: AbortSignal; deadline?: number } = {},
  ): Promise<void> {
    if (!this.open) return;
    const lists = await Promise.all(
      [...new Set(nodes)].map((n) => this.api.activeTasks(n, { type: 'qmconfig' }, { signal: o.signal })),
    );
    const seen = Date.now();
    let waiting = lists.flat().filter((t) => this.foreign(t));
    if (waiting.length === 0) return;
    this.o.log.warn(
      { cluster: this.o.cluster, tasks: waiting.map((t) => t.upid) },
      `${what}: waiting for VM config changes sent before this process started (a previous run's, which may attach this disk)`,
    );
    for (let delay = 100; ; delay = Math.min(delay * 2, 1_000)) {
      const t = waiting[0];
      if (t && o.deadline !== undefined && Date.now() + delay + ANSWER_MARGIN_MS > o.deadline) {
        throw new Busy(
          `${what}: VM ${t.id} on ${t.node} has a config change still running (task ${t.upid}) that an earlier run of this driver sent before it stopped; it may attach this disk there, so this call waits until it ended (at most ${Math.round(this.windowMs / 1000)} s); retry`,
        );
      }
      await sleep(delay, o.signal);
      // Past its lock wait a change has written its pending section (visible to the exclusivity
      // check) or failed; counted on this host's clock from when the task was seen running.
      if (Date.now() >= seen + this.windowMs) return;
      const states = await Promise.all(waiting.map((t) => this.api.taskStatus(t.node, t.upid, { signal: o.signal })));
      waiting = waiting.filter((_, i) => states[i]?.status === 'running');
      if (waiting.length === 0) return;
    }
  }

  private foreign(t: ActiveTask): boolean {
    return (
      t.type === 'qmconfig' && !this.own.has(t.upid) && (this.o.identity === undefined || t.user === this.o.identity)
    );
  }
}
