// The cluster's disk → VM view: every VM's config and pending entries as last read, with when.
// Proving that no other VM holds a disk means reading every VM on its host (one GET …/pending
// per VM: 40 calls on a host of 40 VMs); doing that before and after each publish made the
// cost of a publish grow with the number of VMs. Instead:
// - every read of a VM's entries by this process (attach queues, scans, listings) lands here,
//   and this process's own landed changes are applied to the entries it read before;
// - a check reuses entries younger than the cache TTL and re-reads only the older ones;
// - what another instance of the driver changed since is found in ONE call: GET
//   /nodes/{node}/tasks. Every attach of the driver is a POST …/config, i.e. a `qmconfig` task,
//   and a token without Sys.Audit is shown exactly the tasks of its own token — every instance
//   of this driver, past or concurrent. A VM with such a task that ended after its entries were
//   read (or still runs) is re-read (after the task ended) before the answer counts.
// What this cannot see within the TTL: a disk attached to another VM by hand through a PUT or
// `qm set` (no task of our token) in the last TTL seconds. Detaches never matter (they free).
import { isCsiError } from '../../../errors.js';
import type { ConfigEntry, ProxmoxReadApi, TaskListItem, VmResource } from '../../api/api.js';
import { sleep } from '../../api/tasks.js';
import type { VmEntries } from './scan.js';
import type { VmLocator, VmRef } from './vm-locator.js';
import { mapLimit } from '../../../map-limit.js';

interface Seen {
  vm: VmRef;
  entries: ConfigEntry[];
  /** When the read that produced these entries was sent (ms). */
  readAt: number;
}

export interface IndexScan {
  signal?: AbortSignal | undefined;
  /** Only VMs on these Proxmox nodes; all nodes when undefined. */
  nodes?: readonly string[] | undefined;
  /** VMIDs to leave out (the VM being published to). */
  exclude?: readonly number[] | undefined;
  /** Entries younger than this are reused; default 0 = read every VM now. */
  maxAgeMs?: number | undefined;
}

/** How far back a task of another instance can have started and still be landing (lock wait + hot-plug). */
const TASK_REACH_MS = 60_000;
/** Task list times are whole seconds. */
const CLOCK_SLACK_MS = 1_000;

const asRef = (v: VmRef | VmResource): VmRef => ({ vmid: v.vmid, node: v.node, name: v.name });

export class DiskIndex {
  private readonly seen = new Map<number, Seen>();
  /** UPIDs of config tasks this process started, with when (pruned after TASK_REACH_MS). */
  private readonly own = new Map<string, number>();

  constructor(
    private readonly api: ProxmoxReadApi,
    private readonly locator: VmLocator,
  ) {}

  /** Records what a read of the VM's entries returned; an older read never replaces a newer one. */
  note(vm: VmRef | VmResource, entries: ConfigEntry[], readAt: number): void {
    const prev = this.seen.get(vm.vmid);
    if (prev && prev.readAt > readAt) return;
    this.seen.set(vm.vmid, { vm: asRef(vm), entries, readAt });
  }

  /**
   * A change of this process landed: the entries become what they were plus the change. The
   * read time stays that of the read the change was planned on, since what others did in
   * between is not known.
   */
  applied(vmid: number, set: Record<string, string>, del: readonly string[]): void {
    const s = this.seen.get(vmid);
    if (!s) return;
    const entries = s.entries.filter((e) => !del.includes(e.key) && !(e.key in set));
    for (const [key, value] of Object.entries(set)) entries.push({ key, value });
    this.seen.set(vmid, { ...s, entries });
  }

  forget(vmid: number): void {
    this.seen.delete(vmid);
  }

  /** A config task this process started (never mistaken for another instance's). */
  mine(upid: string): void {
    const now = Date.now();
    this.own.set(upid, now);
    for (const [u, at] of this.own) if (now - at > TASK_REACH_MS * 2) this.own.delete(u);
  }

  isMine(upid: string): boolean {
    return this.own.has(upid);
  }

  readAt(vmid: number): number | undefined {
    return this.seen.get(vmid)?.readAt;
  }

  /** Reads one VM's entries now (and records them); undefined when the VM is gone from its node. */
  async read(vm: VmRef | VmResource, signal?: AbortSignal): Promise<ConfigEntry[] | undefined> {
    const at = Date.now();
    try {
      const entries = await this.api.vmPending(vm.node, vm.vmid, { signal });
      this.note(vm, entries, at);
      return entries;
    } catch (e) {
      // Deleted or migrated since the list was read: nothing of ours can be attached there.
      if (isCsiError(e, 'NotFound')) {
        this.seen.delete(vm.vmid);
        this.locator.invalidate();
        return undefined;
      }
      throw e;
    }
  }

  /** Every QEMU VM's entries (on `nodes`, without `exclude`), re-reading those older than maxAgeMs. */
  async scan(o: IndexScan = {}): Promise<VmEntries[]> {
    const vms = (await this.locator.list(o.signal)).filter(
      (v) => (!o.nodes || o.nodes.includes(v.node)) && !o.exclude?.includes(v.vmid),
    );
    const maxAge = o.maxAgeMs ?? 0;
    const now = Date.now();
    const read = await mapLimit(vms, 8, async (vm): Promise<VmEntries | undefined> => {
      const s = this.seen.get(vm.vmid);
      if (s && maxAge > 0 && now - s.readAt < maxAge && s.vm.node === vm.node) return { vm, entries: s.entries };
      const entries = await this.read(vm, o.signal);
      return entries && { vm, entries };
    });
    return read.filter((r): r is VmEntries => r !== undefined);
  }

  /**
   * Config tasks of this token on `node` that started since `sinceMs` (minus the reach of a
   * task), newest first: this process's own and every other instance's.
   */
  async tasks(node: string, sinceMs: number, signal?: AbortSignal): Promise<TaskListItem[]> {
    const since = Math.floor((sinceMs - TASK_REACH_MS) / 1000);
    return this.api.nodeTasks(node, { typefilter: 'qmconfig', source: 'all', since, limit: 500 }, { signal });
  }

  /**
   * VMs (on `node`, but `exclude`) whose entries another instance's config task may have
   * changed since they were read: its task ended after the read or still runs. Running ones are
   * waited for (up to `waitMs`) first; then those VMs are re-read. Returns the re-read VMs.
   */
  async catchUp(
    node: string,
    tasks: readonly TaskListItem[],
    exclude: readonly number[],
    o: { signal?: AbortSignal | undefined; waitMs?: number | undefined } = {},
  ): Promise<VmEntries[]> {
    const stale = new Map<number, TaskListItem[]>();
    for (const t of tasks) {
      if (t.type !== 'qmconfig' || this.own.has(t.upid) || t.node !== node) continue;
      const vmid = Number(t.id);
      if (!Number.isInteger(vmid) || exclude.includes(vmid)) continue;
      const readAt = this.seen.get(vmid)?.readAt;
      const ended = t.status === 'RUNNING' ? undefined : t.endtime;
      if (ended !== undefined && readAt !== undefined && ended * 1000 + CLOCK_SLACK_MS < readAt) continue;
      stale.set(vmid, [...(stale.get(vmid) ?? []), t]);
    }
    if (stale.size === 0) return [];
    const vms = await this.locator.list(o.signal);
    const deadline = Date.now() + (o.waitMs ?? 15_000);
    const out = await Promise.all(
      [...stale].map(async ([vmid, ts]): Promise<VmEntries | undefined> => {
        for (const t of ts) await this.settled(node, t, deadline, o.signal);
        const vm = vms.find((v) => v.vmid === vmid) ?? this.seen.get(vmid)?.vm ?? { vmid, node, name: String(vmid) };
        const entries = await this.read(vm, o.signal);
        return entries && { vm: { type: 'qemu', vmid: vm.vmid, node: vm.node, name: vm.name }, entries };
      }),
    );
    return out.filter((r): r is VmEntries => r !== undefined);
  }

  /** Waits until another instance's task stopped (its outcome does not matter, only that it landed or not). */
  private async settled(node: string, t: TaskListItem, deadline: number, signal?: AbortSignal): Promise<void> {
    if (t.status !== 'RUNNING' && t.endtime !== undefined) return;
    let delay = 20;
    while (Date.now() < deadline) {
      const st = await this.api.taskStatus(node, t.upid, { signal });
      if (st.status === 'stopped') return;
      await sleep(delay, signal);
      delay = Math.min(delay * 2, 500);
    }
  }
}
