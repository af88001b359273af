// One queue per VM for attaching and detaching disks: the executor. Proxmox lets one writer
// change a VM's config at a time and makes others wait on a lock, so concurrent publishes to a
// VM would race for the same free slot and time out on the lock. Instead, everything that
// arrives for a VM while its previous change is in flight is merged (batcher.ts): one unlink for
// all detaches, one config change setting every new scsiN, as planned from one read of the VM's
// config (attach-plan.ts). Every failure is followed by a read before anything is retried,
// because a failed call may still have taken effect.
//
// Proxmox round trips of an exclusive publish on the happy path: GET …/pending (entries and
// digest: the plan, the VM's own disks, whether the VM hot-plugs disks), POST …/config with that
// digest, GET /nodes/{node}/tasks (this change's task status, and every config task another
// instance of the driver ran on the host since: the exclusivity re-check, disk-index.ts). An OK
// task on a VM that hot-plugs disks is an applied change (qemu-server raises `hotplug problem`
// otherwise); only a VM without disk hot-plug is polled until its change leaves `pending`.
import type { Logger } from 'pino';
import { Busy, DeadlineExceeded, FailedPrecondition, NotFound, Unavailable, isCsiError } from '../../errors.js';
import type { ConfigEntry, ProxmoxApi, TaskListItem } from '../api/api.js';
import { digestRefused, outcomeUncertain, taskError } from '../api/errors.js';
import { backoffDelay, sleep, waitTask } from '../api/tasks.js';
import {
  type AttachRequest,
  type DetachRequest,
  type Found,
  HelperLeftovers,
  type UpdateRequest,
  attachOutcome,
  attachedFor,
  conflictOf,
  driverSites,
  detachKeys,
  holdersOf,
  hotplugsDisks,
  obstacles,
  planAttach,
  planDetach,
  planUpdate,
  settle,
  unlinkVerified,
  updateLanded,
  updateSites,
  what,
} from './attach-plan.js';
import { Batcher } from './batcher.js';
import { ContentCache } from './content-cache.js';
import { DiskIndex } from './disk-index.js';
import { type FenceKind, Fences } from './fences.js';
import type { VmEntries } from './scan.js';
import type { VmLocator, VmRef } from './vm-locator.js';
import { diskOwner, volidOf } from '../volume-id.js';
import { defined } from '../../defined.js';

export { type AttachRequest, type DetachRequest, HelperLeftovers, type UpdateRequest } from './attach-plan.js';

export interface QueueOptions {
  api: ProxmoxApi;
  cluster: string;
  locator: VmLocator;
  log: Logger;
  /** How long a queue waits for company before each change; default 0: the first read is the window (batcher.ts). */
  mergeWindowMs?: number;
  /** Config changes tried per batch (lock timeouts, lost answers); default 8. */
  attempts?: number;
  /** How long a change may stay pending (hot-plug in progress) before it is an error; default 10 s. */
  confirmTimeoutMs?: number;
  taskTimeoutMs?: number;
  /** Shared with the cluster's other mutating paths; a private set by default. */
  fences?: Fences;
  /** The cluster's disk → VM view; a private one by default. */
  index?: DiskIndex | undefined;
  /** The cluster's view of its own disks per storage; a private one by default. */
  content?: ContentCache | undefined;
  /** How old other VMs' entries may be for the exclusivity check before they are read again; default 5 s. */
  indexMaxAgeMs?: number | undefined;
}

/** Unlinks issued per detach batch: each one re-triggers a hot-unplug the guest did not finish. */
const DETACH_UNLINKS = 3;

interface JobBase {
  /** The batch decided this job (its change landed, failed, or was never sent). */
  done: boolean;
  /** Taken into a batch: its change may be sent; a caller giving up no longer removes it. */
  taken: boolean;
  /** The caller gave up after the job was taken: no new change is sent for it. */
  abandoned: boolean;
  /** When a change for it was sent without a known outcome (lost answer), for the fence. */
  uncertainSince?: number;
  reject(e: unknown): void;
}
interface AttachJob extends JobBase {
  kind: 'attach';
  req: AttachRequest;
  /** Seen attached (an exclusive publish): answered only after the exclusivity re-check. */
  landedSlot?: number;
  resolve(slot: number): void;
}
interface DetachJob extends JobBase {
  kind: 'detach';
  req: DetachRequest;
  resolve(): void;
}
interface UpdateJob extends JobBase {
  kind: 'update';
  req: UpdateRequest;
  resolve(): void;
}
type Job = AttachJob | DetachJob | UpdateJob;

const isOpen = (j: AttachJob): boolean => !j.done && j.landedSlot === undefined;

/** Answers the jobs a detach or update plan decided (refused, or already as asked); the rest stay open. */
function answerPlanned<J extends DetachJob | UpdateJob>(
  open: J[],
  plan: { done: number[]; rejects: Map<number, Error> },
): J[] {
  plan.rejects.forEach((err, i) => open[i]?.reject(err));
  for (const i of plan.done) open[i]?.resolve();
  return open.filter((j) => !j.done);
}

/** What a caller asks for; enqueue() makes the job of it. */
type NewJob = Pick<AttachJob, 'kind' | 'req'> | Pick<DetachJob, 'kind' | 'req'> | Pick<UpdateJob, 'kind' | 'req'>;

/** A caller's new job: not taken into a batch, not decided, not given up. */
const NEW_JOB = { done: false, taken: false, abandoned: false } as const;

interface VmState {
  digest?: string | undefined;
  entries: ConfigEntry[];
}

/** What a landed change's task told: the node's config tasks of this token, listed after it. */
interface Landed {
  node: string;
  tasks: TaskListItem[];
}

export class AttachQueues {
  private readonly batcher: Batcher<number, Job>;
  /** The VM each key stands for while its queue runs (its node follows a migration). */
  private readonly vms = new Map<number, VmRef>();
  private readonly attempts: number;
  private readonly confirmTimeoutMs: number;
  private readonly maxAgeMs: number;
  readonly fences: Fences;
  readonly index: DiskIndex;
  readonly content: ContentCache;

  constructor(private readonly o: QueueOptions) {
    this.attempts = o.attempts ?? 8;
    this.confirmTimeoutMs = o.confirmTimeoutMs ?? 10_000;
    this.maxAgeMs = o.indexMaxAgeMs ?? 5_000;
    this.fences = o.fences ?? new Fences();
    this.index = o.index ?? new DiskIndex(o.api, o.locator);
    this.content = o.content ?? new ContentCache(o.api, this.maxAgeMs);
    this.batcher = new Batcher((vmid, jobs) => this.batch(vmid, jobs), { windowMs: o.mergeWindowMs ?? 0 });
  }

  /**
   * Attaches the disk to the VM (or finds it attached); resolves with its slot. Refused with
   * ABORTED while another VM has a change of the disk that may still land.
   */
  attach(vm: VmRef, req: AttachRequest, signal?: AbortSignal): Promise<number> {
    const volid = volidOf(req.storage, req.disk);
    try {
      this.fences.check(volid, `${req.helper ? 'expanding' : 'publishing'} ${volid} to ${what(vm)}`, vm.vmid);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.enqueue(vm, volid, req.helper ? 'helper-attach' : 'attach', signal, { kind: 'attach', req });
  }

  /** Detaches the disk from the VM, leaving no pending or unused entry of it behind. */
  detach(vm: VmRef, req: DetachRequest, signal?: AbortSignal): Promise<void> {
    return this.enqueue(vm, volidOf(req.storage, req.disk), 'detach', signal, { kind: 'detach', req });
  }

  /** Rewrites the disk's drive line in place (a no-op when the VM does not have it attached). */
  update(vm: VmRef, req: UpdateRequest, signal?: AbortSignal): Promise<void> {
    return this.enqueue(vm, volidOf(req.storage, req.disk), 'modify', signal, { kind: 'update', req });
  }

  /** Queues a job (answered with T: the slot of an attach, nothing otherwise) under a fence of `kind`. */
  private enqueue<T>(
    vm: VmRef,
    volid: string,
    kind: FenceKind,
    signal: AbortSignal | undefined,
    asked: NewJob,
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (signal?.aborted) {
        reject(new DeadlineExceeded('cancelled before the VM config was changed'));
        return;
      }
      // The fence lives as long as the job, not as long as its caller (fences.ts).
      const lift = this.fences.hold(volid, kind, vm);
      let answered = false;
      const answer = (f: () => void) => {
        if (answered) return;
        answered = true;
        signal?.removeEventListener('abort', onAbort);
        f();
      };
      // The resolve of each job kind takes what that kind answers with (attach: the slot).
      const job = {
        ...asked,
        ...NEW_JOB,
        resolve: (v: T) => {
          if (job.done) return;
          job.done = true;
          lift();
          answer(() => resolve(v));
        },
        reject: (e: unknown) => {
          if (job.done) return;
          job.done = true;
          lift({ uncertainSince: job.uncertainSince });
          answer(() => reject(e));
        },
      } as Job;
      const onAbort = () => {
        if (!job.taken && this.batcher.remove(vm.vmid, job)) {
          // Never sent: proven not to land.
          job.reject(new DeadlineExceeded('cancelled before the VM config was changed'));
          return;
        }
        job.abandoned = true;
        answer(() =>
          reject(
            new DeadlineExceeded(
              `gave up waiting for the config change of ${what(vm)}; a change already sent runs to its outcome in the background and ${volid} stays fenced until then`,
            ),
          ),
        );
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      // A fresh ref when the VM's queue is idle; a running one may have followed a migration.
      if (!this.batcher.has(vm.vmid)) this.vms.set(vm.vmid, { ...vm });
      this.batcher.add(vm.vmid, job);
    });
  }

  /** One batch of a VM: detaches first, then attaches (and their re-check), then option changes. */
  private async batch(vmid: number, taken: Job[]): Promise<void> {
    const vm = defined(this.vms.get(vmid), `the queue's VM ${vmid}`);
    const jobs = taken.filter((j) => !j.done);
    for (const j of jobs) j.taken = true;
    if (jobs.length === 0) return;
    this.o.log.debug(
      {
        vmid,
        vm: vm.name,
        attach: jobs.filter((j) => j.kind === 'attach').length,
        detach: jobs.filter((j) => j.kind === 'detach').length,
      },
      'VM config batch',
    );
    try {
      const detaches = jobs.filter((j): j is DetachJob => j.kind === 'detach');
      const attaches = jobs.filter((j): j is AttachJob => j.kind === 'attach');
      if (detaches.length) await this.detachBatch(vm, detaches, jobs);
      if (attaches.length) {
        const landed = await this.attachBatch(vm, attaches, true, jobs);
        await this.recheck(
          vm,
          attaches.filter((j) => !j.done && j.landedSlot !== undefined),
          landed,
        );
      }
      const updates = jobs.filter((j): j is UpdateJob => j.kind === 'update' && !j.done);
      if (updates.length) await this.updateBatch(vm, updates);
    } catch (e) {
      for (const j of jobs) j.reject(e);
    }
  }

  /**
   * Jobs of one kind queued for the VM since its batch started, now part of it (batcher.ts
   * takeLate): the batch's first read is its merge window. Only when nothing else is queued,
   * so a later detach never overtakes an earlier attach or the other way round.
   */
  private late<J extends Job>(vm: VmRef, kind: J['kind'], batch: Job[]): J[] {
    const late = this.batcher.takeLate(vm.vmid, (j) => j.kind === kind).filter((j): j is J => !j.done);
    for (const j of late) j.taken = true;
    batch.push(...late);
    return late;
  }

  /** Config, pending entries and digest in one read; follows a VM that migrated to another node. */
  private async readState(vm: VmRef): Promise<VmState> {
    for (let moved = false; ; moved = true) {
      try {
        const at = Date.now();
        const entries = await this.o.api.vmPending(vm.node, vm.vmid);
        this.index.note(vm, entries, at);
        return {
          digest: entries.find((e) => e.key === 'digest')?.value || undefined,
          entries: entries.filter((e) => e.key !== 'digest'),
        };
      } catch (e) {
        if (!isCsiError(e, 'NotFound') || moved) throw e;
        const now = await this.o.locator.byVmid(vm.vmid);
        if (!now)
          throw new NotFound(`VM ${vm.name} (${vm.vmid}) no longer exists in Proxmox cluster ${this.o.cluster}`, {
            cause: e,
          });
        if (now.node === vm.node) throw e;
        vm.node = now.node;
      }
    }
  }

  /** Re-reads until `done(entries)` or the confirm timeout; returns the last state read. */
  private async poll(vm: VmRef, done: (entries: ConfigEntry[]) => boolean): Promise<VmState> {
    const deadline = Date.now() + this.confirmTimeoutMs;
    let delay = 25;
    for (;;) {
      const state = await this.readState(vm);
      if (done(state.entries) || Date.now() + delay > deadline) return state;
      await sleep(delay);
      delay = Math.min(delay * 2, 1_000);
    }
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
    const tasks = await this.index.tasks(vm.node, Date.now() - this.maxAgeMs);
    const mine = tasks.find((t) => t.upid === upid);
    const exit = mine && mine.status !== 'RUNNING' && mine.endtime !== undefined ? (mine.status ?? '') : undefined;
    if (exit === undefined) await waitTask(this.o.api, vm.node, upid, opts);
    else if (!(exit === 'OK' || /^WARNINGS?: \d+$/.test(exit))) throw taskError(exit || 'unknown error', opts);
    return { node: vm.node, tasks };
  }

  /** `batch`: the batch's jobs, when detaches queued during the first read may join (late). */
  private async detachBatch(vm: VmRef, jobs: DetachJob[], batch?: Job[]): Promise<void> {
    let open = jobs;
    let last: VmState | undefined;
    let unlinks = 0;
    let lastErr: unknown;
    for (let attempt = 1; attempt <= this.attempts && unlinks < DETACH_UNLINKS; attempt++) {
      let state: VmState;
      try {
        state = last ?? (await this.readState(vm));
      } catch (e) {
        if (batch) open.push(...this.late<DetachJob>(vm, 'detach', batch));
        if (isCsiError(e, 'NotFound')) {
          for (const j of open) j.resolve();
          return;
        }
        throw e;
      }
      if (batch && attempt === 1) open.push(...this.late<DetachJob>(vm, 'detach', batch));
      last = undefined;
      const plan = planDetach(
        vm,
        state.entries,
        open.map((j) => j.req),
      );
      open = answerPlanned(open, plan);
      if (open.length === 0) return;
      try {
        unlinks++;
        // With the digest of the read the plan came from: a slot another writer changed since
        // is refused, never detached (the disk now in it may be another one).
        await this.o.api.unlinkDisks(vm.node, vm.vmid, plan.unlink, { digest: state.digest });
      } catch (e) {
        if (isCsiError(e, 'Aborted')) {
          unlinks--;
          this.o.log.info({ vmid: vm.vmid, attempt, err: (e as Error).message }, 'VM busy, retrying detach');
          // A changed config is read again at once; a lock held elsewhere is waited out.
          if (!digestRefused(e)) await sleep(backoffDelay(attempt));
          continue;
        }
        // A refused hot-unplug (e.g. `hotplug problem`) leaves a pending delete: read, re-issue.
        if (isCsiError(e, 'FailedPrecondition')) {
          for (const j of open) j.reject(e);
          return;
        }
        lastErr = e;
        continue;
      }
      if (state.digest && unlinkVerified(state.entries, plan.unlink)) {
        // The synchronous answer on the config the plan was read from is the verification
        // (unlinkVerified): no read-back on the happy path.
        this.index.applied(vm.vmid, {}, plan.unlink);
        for (const j of open) j.resolve();
        return;
      }
      try {
        last = await this.poll(vm, (en) => open.every((j) => detachKeys(vm.vmid, en, j.req).length === 0));
      } catch (e) {
        if (isCsiError(e, 'NotFound')) {
          for (const j of open) j.resolve();
          return;
        }
        throw e;
      }
    }
    const entries = last?.entries ?? (await this.readState(vm)).entries;
    for (const j of open) {
      const keys = detachKeys(vm.vmid, entries, j.req);
      if (keys.length === 0) j.resolve();
      else {
        const why = lastErr ? `: ${(lastErr as Error).message}` : '';
        j.reject(
          new Unavailable(
            `${volidOf(j.req.storage, j.req.disk)} is still on ${what(vm)} as ${keys.join(', ')} (pending delete: hot-unplug did not complete${why}); retrying later`,
          ),
        );
      }
    }
  }

  /**
   * One config change for every drive line to rewrite. qemu-server applies backup and throttle
   * options of an attached disk at once (throttling through QEMU); a value that stays pending
   * would only take effect at the VM's next start, so that is reported, not taken as success.
   */
  private async updateBatch(vm: VmRef, jobs: UpdateJob[]): Promise<void> {
    let open = jobs;
    for (let attempt = 1; open.length > 0; attempt++) {
      const state = await this.readState(vm);
      const plan = planUpdate(
        vm,
        state.entries,
        open.map((j) => j.req),
      );
      open = answerPlanned(open, plan);
      if (open.length === 0) return;
      if (attempt > this.attempts) {
        const err = new Unavailable(
          `could not change the config of ${what(vm)} after ${this.attempts} attempts (lock contention or lost answers); retrying later`,
        );
        for (const j of open) j.reject(err);
        return;
      }
      try {
        const upid = await this.o.api.updateVmConfig(vm.node, vm.vmid, { set: plan.set, digest: state.digest });
        if (upid) {
          this.index.mine(upid);
          await this.finish(vm, upid, 'change drive options on', false);
        }
      } catch (e) {
        if (isCsiError(e, 'Aborted')) {
          this.o.log.info(
            { vmid: vm.vmid, attempt, err: (e as Error).message },
            'VM busy, retrying drive option change',
          );
          await sleep(backoffDelay(attempt));
          continue;
        }
        if (outcomeUncertain(e)) continue;
        // Read back: qemu-server reports a value it could not hot-apply but keeps it pending.
        const after = (await this.readState(vm)).entries;
        if (
          open.every(
            (j) => !after.some((en) => en.pending !== undefined && updateSites(vm.vmid, [en], j.req).length > 0),
          )
        )
          for (const j of open) j.reject(e);
        return;
      }
      const { entries } = await this.poll(vm, (en) => open.every((j) => updateLanded(vm.vmid, en, j.req)));
      for (const j of open) {
        const sites = updateSites(vm.vmid, entries, j.req);
        if (updateLanded(vm.vmid, entries, j.req)) j.resolve();
        else if (sites.some((s) => entries.find((e) => e.key === s.key)?.pending !== undefined)) {
          j.reject(
            new FailedPrecondition(
              `the new options of ${volidOf(j.req.storage, j.req.disk)} stay a pending change of ${what(vm)} (${sites.map((s) => s.key).join(', ')}): Proxmox applies them only when the VM restarts`,
            ),
          );
        }
      }
      open = open.filter((j) => !j.done);
    }
  }

  private settleFound(vm: VmRef, j: AttachJob, f: Found): void {
    if (f.kind === 'reject') {
      j.reject(f.error);
      return;
    }
    if (f.oddWwn)
      this.o.log.warn(
        { vmid: vm.vmid, slot: f.slot, wwn: f.oddWwn },
        "disk is attached with a WWN other than its slot's (attached by hand?); the node looks for the slot's WWN and may not find it",
      );
    if (j.req.exclusive && !j.req.helper) j.landedSlot = f.slot;
    else j.resolve(f.slot);
  }

  /** Other VMs on these hosts as the index has them (re-read when older than its TTL). */
  private others(vm: VmRef, nodes: string[]): Promise<VmEntries[]> {
    return this.index.scan({ nodes, exclude: [vm.vmid], maxAgeMs: this.maxAgeMs });
  }

  /**
   * Why the disk may not go to this VM: another VM has it (exclusive requests). A holder seen in
   * entries read earlier is read again first: a detach since then must not refuse the publish.
   */
  private async exclusivity(vm: VmRef, jobs: AttachJob[], scan: VmEntries[]): Promise<Map<AttachJob, Error>> {
    const out = new Map<AttachJob, Error>();
    let current = scan;
    const stale = [
      ...new Set(jobs.filter((j) => conflictOf(current, j.req)).flatMap((j) => holdersOf(current, j.req))),
    ].filter((vmid) => (this.index.readAt(vmid) ?? 0) < Date.now() - 50);
    if (stale.length) {
      const fresh = await Promise.all(
        current
          .filter((v) => stale.includes(v.vm.vmid))
          .map(async (v) => ({ vm: v.vm, entries: await this.index.read(v.vm) })),
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
  private async recheck(vm: VmRef, landed: AttachJob[], seen: Landed | undefined): Promise<void> {
    if (landed.length === 0) return;
    const nodes = [...new Set(landed.map((j) => j.req.diskNode))];
    for (const node of nodes) {
      const tasks = seen && seen.node === node ? seen.tasks : await this.index.tasks(node, Date.now() - this.maxAgeMs);
      await this.index.catchUp(node, tasks, [vm.vmid], { waitMs: this.confirmTimeoutMs });
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
      let failed: unknown;
      await this.detachBatch(vm, [
        {
          kind: 'detach',
          req: { storage: j.req.storage, disk: j.req.disk },
          done: false,
          taken: true,
          abandoned: false,
          resolve() {
            this.done = true;
          },
          reject(e: unknown) {
            this.done = true;
            failed = e;
          },
        },
      ]).catch((e: unknown) => (failed = e));
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

  /** Refuses disks that do not exist or that another VM holds (exclusive requests). */
  private async precheck(vm: VmRef, jobs: AttachJob[]): Promise<void> {
    const exclusive = jobs.filter((j) => j.req.exclusive);
    const [, conflicts] = await Promise.all([
      Promise.all(
        jobs.map(async (j) => {
          const { item } = await this.content.find(
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
        : // The disk's owner VM too: its own disks are never attached elsewhere (issue 10, defect 3).
          this.others(vm, [...new Set(exclusive.map((j) => j.req.diskNode))]).then((scan) =>
            this.exclusivity(vm, exclusive, scan),
          ),
    ]);
    for (const [j, c] of conflicts) if (!j.done) j.reject(c);
  }

  /**
   * Returns what the landed change's task list said (for the re-check), when one was sent.
   * `batch`: the batch's jobs, when attaches queued during the first read may join (late);
   * they are added to `jobs` too, which the caller re-checks.
   */
  private async attachBatch(vm: VmRef, jobs: AttachJob[], check: boolean, batch?: Job[]): Promise<Landed | undefined> {
    let open = jobs.filter((j) => !j.done);
    let landed: Landed | undefined;
    for (let attempt = 1; open.length > 0; attempt++) {
      const [state] = await Promise.all([
        this.readState(vm),
        check && attempt === 1 ? this.precheck(vm, open) : undefined,
      ]);
      if (batch && attempt === 1) {
        const late = this.late<AttachJob>(vm, 'attach', batch);
        if (late.length) {
          jobs.push(...late);
          open.push(...late);
          if (check) await this.precheck(vm, late);
        }
      }
      open = open.filter(isOpen);
      settle(
        vm,
        state.entries,
        open.map((j) => j.req),
      ).forEach((f, i) => {
        const j = open[i];
        if (f && j) this.settleFound(vm, j, f);
      });
      open = open.filter(isOpen);
      // A caller that gave up gets no new change sent; what was sent has been read back above.
      for (const j of open) if (j.abandoned) j.reject(new DeadlineExceeded('caller gave up; no further change sent'));
      open = open.filter(isOpen);
      if (open.length === 0) return landed;
      if (attempt > this.attempts) {
        const err = new Unavailable(
          `could not change the config of ${what(vm)} after ${this.attempts} attempts (lock contention or lost answers); retrying later`,
        );
        open.forEach((j) => j.reject(err));
        return landed;
      }

      // Plan: finish pending detaches of these disks first, then one change for all the rest.
      const plan = planAttach(
        vm,
        state.entries,
        open.map((j) => j.req),
      );
      plan.rejects.forEach((err, i) => open[i]?.reject(err));
      const assigned = new Map([...plan.assigned].map(([i, slot]) => [defined(open[i], 'a planned job'), slot]));
      open = open.filter(isOpen);
      if (open.length === 0) return landed;

      let applied: boolean;
      try {
        if (plan.unlink.length) {
          await this.o.api.unlinkDisks(vm.node, vm.vmid, plan.unlink, { digest: state.digest });
          await this.poll(vm, (en) => open.every((j) => obstacles(vm.vmid, en, j.req).length === 0));
          continue;
        }
        const upid = await this.o.api.updateVmConfig(vm.node, vm.vmid, {
          set: plan.set,
          delete: plan.delete.length ? plan.delete : undefined,
          digest: state.digest,
        });
        if (upid) {
          this.index.mine(upid);
          landed = await this.finish(
            vm,
            upid,
            'attach disks to',
            open.some((j) => j.req.exclusive && !j.req.helper),
          );
        }
        // Applied unless the VM keeps disk changes pending (no disk hot-plug): qemu-server fails
        // the task with `hotplug problem` when a hot-plug fails.
        applied = hotplugsDisks(state.entries);
        if (applied) this.index.applied(vm.vmid, plan.set, plan.delete);
      } catch (e) {
        if (isCsiError(e, 'Aborted')) {
          this.o.log.info({ vmid: vm.vmid, attempt, err: (e as Error).message }, 'VM busy, retrying attach');
          await sleep(backoffDelay(attempt));
          continue;
        }
        if (outcomeUncertain(e)) {
          // Sent, outcome unknown: it may still land (e.g. waiting for the VM lock).
          const now = Date.now();
          for (const j of open) j.uncertainSince ??= now;
          continue;
        }
        if (open.length > 1) {
          // One disk's problem must not fail the others: try each on its own.
          for (const j of open) landed = (await this.attachBatch(vm, [j], false)) ?? landed;
          return landed;
        }
        open.forEach((j) => j.reject(e));
        return landed;
      }

      const entries = applied
        ? [
            ...state.entries.filter((e) => !(e.key in plan.set) && !plan.delete.includes(e.key)),
            ...Object.entries(plan.set).map(([key, value]) => ({ key, value })),
          ]
        : (
            await this.poll(vm, (en) =>
              open.every(
                (j) =>
                  attachedFor(vm.vmid, en, j.req) || driverSites(en, j.req.storage, j.req.disk, vm.vmid).length === 0,
              ),
            )
          ).entries;
      for (const j of open) {
        const out = attachOutcome(vm, entries, j.req, assigned.get(j));
        if (out.kind === 'attached' || out.kind === 'reject') this.settleFound(vm, j, out);
      }
      open = open.filter(isOpen);
    }
    return landed;
  }
}
