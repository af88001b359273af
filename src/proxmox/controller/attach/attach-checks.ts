// The attach queue's checks around a change, which read other VMs and storages (never the VM
// being changed): before it, that every disk exists and that no other VM holds an exclusive
// disk; after exclusive attaches landed, that no other VM got the disk meanwhile (else this
// attachment is withdrawn). The decisions are attach-plan.ts's (conflictOf, holdersOf).
import type { Logger } from 'pino';
import { Busy, FailedPrecondition, NotFound, Unavailable } from '../../../errors.js';
import { type DetachRequest, HelperLeftovers, conflictOf, holdersOf, what } from './attach-plan.js';
import type { AttachJob } from './attach-jobs.js';
import type { Landed } from './attach-exec.js';
import type { ContentCache } from '../state/content-cache.js';
import type { DiskIndex } from '../state/disk-index.js';
import type { VmEntries } from '../state/scan.js';
import type { VmRef } from '../state/vm-locator.js';
import { diskOwner, volidOf } from '../../volume-id.js';
import { defined } from '../../../defined.js';

export interface ChecksOptions {
  index: DiskIndex;
  content: ContentCache;
  log: Logger;
  /** How old other VMs' entries may be before they are read again. */
  maxAgeMs: number;
  /** How long the re-check waits for another instance's config tasks to end. */
  confirmTimeoutMs: number;
}

/** Detaches the disk from the VM; resolves with why it failed (undefined: gone). */
export type Withdraw = (vm: VmRef, req: DetachRequest) => Promise<unknown>;

/** Every host whose VMs can hold one of these jobs' disks (all hosts of a shared storage). */
const holderNodesOf = (jobs: readonly AttachJob[]): string[] => [
  ...new Set(jobs.flatMap((j) => j.req.holderNodes ?? [j.req.diskNode])),
];

export class AttachChecks {
  constructor(private readonly o: ChecksOptions) {}

  /** Refuses disks that do not exist or that another VM holds (exclusive requests). */
  async precheck(vm: VmRef, jobs: AttachJob[]): Promise<void> {
    const exclusive = jobs.filter((j) => j.req.exclusive);
    const [, conflicts] = await Promise.all([
      Promise.all(
        jobs.map(async (j) => {
          const { item } = await this.o.content.find(
            j.req.diskNode,
            j.req.storage,
            diskOwner(j.req.disk),
            volidOf(j.req.storage, j.req.disk),
          );
          if (!item)
            j.reject(new NotFound(`volume ${volidOf(j.req.storage, j.req.disk)} does not exist on ${j.req.diskNode}`));
        }),
      ),
      exclusive.length === 0
        ? new Map<AttachJob, Error>()
        : // The disk's owner VM too: its own disks are never attached elsewhere (docs/design.md#foreign-disks).
          // Read at decision time, not from the index: a disk put on another VM by hand leaves no
          // task the post-landing re-check could find, so only a fresh read before the change
          // keeps it off two VMs (docs/ownership.md, what a publish reads).
          this.others(vm, holderNodesOf(exclusive), 0).then((scan) => this.exclusivity(exclusive, scan)),
    ]);
    for (const [j, c] of conflicts) if (!j.done) j.reject(c);
  }

  /**
   * After exclusive attaches landed: did another VM get the disk meanwhile? The fence keeps two
   * of this process's attaches of a disk from being in flight together, so a disk found
   * elsewhere now was put there by a change this process did not make (a previous run's change
   * that waited for a lock, another replica). Those are config tasks of this token: the task
   * list read right after this change names them, and only their VMs are read again (after
   * they ended). Deterministic resolution: the attach that sees a competitor after landing
   * withdraws (unlinked and verified gone) and is refused; the other one stays. A competitor
   * that is another live attach sees this one and withdraws too: neither stays, both callers
   * retry with their backoff, and the first to land alone wins.
   */
  async recheck(vm: VmRef, landed: AttachJob[], seen: Landed | undefined, withdraw: Withdraw): Promise<void> {
    if (landed.length === 0) return;
    const nodes = holderNodesOf(landed);
    for (const node of nodes) {
      const tasks =
        seen && seen.node === node ? seen.tasks : await this.o.index.tasks(node, Date.now() - this.o.maxAgeMs);
      await this.o.index.catchUp(node, tasks, [vm.vmid], { waitMs: this.o.confirmTimeoutMs });
    }
    const scan = await this.others(vm, nodes);
    for (const j of landed) {
      const conflict = conflictOf(scan, j.req);
      if (!conflict) {
        j.resolve(defined(j.landedSlot, 'the landed slot'));
        continue;
      }
      this.o.log.warn(
        { vmid: vm.vmid, disk: volidOf(j.req.storage, j.req.disk), err: conflict.message },
        'disk appeared on another VM while it was attached here; withdrawing this attachment',
      );
      const failed = await withdraw(vm, { storage: j.req.storage, disk: j.req.disk });
      const Kind = conflict instanceof HelperLeftovers ? Busy : FailedPrecondition;
      j.reject(
        failed
          ? new Unavailable(
              `${conflict.message}; this attachment to ${what(vm)} was withdrawn but the unlink did not complete (${(failed as Error).message}); retrying later`,
            )
          : new Kind(
              `${conflict.message} (it appeared there while this attach to ${what(vm)} was landing; this one was withdrawn)`,
            ),
      );
    }
  }

  /** Other VMs on these hosts as the index has them (re-read when older than maxAgeMs: 0 reads them now). */
  private others(vm: VmRef, nodes: string[], maxAgeMs = this.o.maxAgeMs): Promise<VmEntries[]> {
    return this.o.index.scan({ nodes, exclude: [vm.vmid], maxAgeMs });
  }

  /**
   * Why the disk may not go to this VM: another VM has it (exclusive requests). A holder seen in
   * entries read earlier is read again first: a detach since then must not refuse the publish.
   */
  private async exclusivity(jobs: AttachJob[], scan: VmEntries[]): Promise<Map<AttachJob, Error>> {
    const out = new Map<AttachJob, Error>();
    let current = scan;
    const stale = [
      ...new Set(jobs.filter((j) => conflictOf(current, j.req)).flatMap((j) => holdersOf(current, j.req))),
    ].filter((vmid) => (this.o.index.readAt(vmid) ?? 0) < Date.now() - 50);
    if (stale.length) {
      const fresh = await Promise.all(
        current
          .filter((v) => stale.includes(v.vm.vmid))
          .map(async (v) => ({ vm: v.vm, entries: await this.o.index.read(v.vm) })),
      );
      current = [
        ...current.filter((v) => !stale.includes(v.vm.vmid)),
        ...fresh.filter((v): v is VmEntries => v.entries !== undefined),
      ];
    }
    for (const j of jobs) {
      const c = conflictOf(current, j.req);
      if (c) out.set(j, c);
    }
    return out;
  }
}
