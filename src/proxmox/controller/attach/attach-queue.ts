// One queue per VM for attaching and detaching disks: the orchestration. Proxmox lets one writer
// change a VM's config at a time and makes others wait on a lock, so concurrent publishes to a
// VM would race for the same free slot and time out on the lock. Instead, everything that
// arrives for a VM while its previous change is in flight is merged (batcher.ts): one unlink for
// all detaches, one config change setting every new scsiN, as planned from one read of the VM's
// config (vm-state.ts, attach-plan.ts) and sent by the executor (attach-exec.ts), with the
// existence and exclusivity checks of attach-checks.ts around it. Every failure is followed by a
// read before anything is retried, because a failed call may still have taken effect
// (attach-retry.ts).
//
// Proxmox round trips of an exclusive publish on the happy path: GET …/pending (entries and
// digest: the plan, the VM's own disks, whether the VM hot-plugs disks), POST …/config with that
// digest, GET /nodes/{node}/tasks (this change's task status, and every config task another
// instance of the driver ran on the host since: the exclusivity re-check, disk-index.ts). An OK
// task on a VM that hot-plugs disks is an applied change (qemu-server raises `hotplug problem`
// otherwise); only a VM without disk hot-plug is polled until its change leaves `pending`.
import type { Logger } from 'pino';
import { DeadlineExceeded, FailedPrecondition, Unavailable, isCsiError } from '../../../errors.js';
import type { ProxmoxReadApi } from '../../api/api.js';
import { digestRefused } from '../../api/errors.js';
import { ConfigExecutor, type Landed } from './attach-exec.js';
import { AttachChecks } from './attach-checks.js';
import {
  type AttachJob,
  type DetachJob,
  type Job,
  NEW_JOB,
  type NewJob,
  type UpdateJob,
  answerPlanned,
  internalDetach,
  isOpen,
  requestsOf,
} from './attach-jobs.js';
import {
  type AttachRequest,
  type DetachRequest,
  type Found,
  type UpdateRequest,
  attachOutcome,
  attachedFor,
  driverSites,
  detachKeys,
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
import { failureOf, retryBusy } from './attach-retry.js';
import { Batcher } from './batcher.js';
import { ContentCache } from '../state/content-cache.js';
import { DiskIndex } from '../state/disk-index.js';
import { type FenceKind, Fences } from '../safety/fences.js';
import { OwnershipPort } from '../safety/ownership-port.js';
import type { VmLocator, VmRef } from '../state/vm-locator.js';
import { VmReader, type VmState } from './vm-state.js';
import { volidOf } from '../../volume-id.js';
import { defined } from '../../../defined.js';

export { type AttachRequest, type DetachRequest, HelperLeftovers, type UpdateRequest } from './attach-plan.js';

export interface QueueOptions {
  api: ProxmoxReadApi;
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
  /** The mutating calls (ownership-port.ts): `api` is read-only by type. */
  port: OwnershipPort;
}

/** Unlinks issued per detach batch: each one re-triggers a hot-unplug the guest did not finish. */
const DETACH_UNLINKS = 3;

export class AttachQueues {
  private readonly batcher: Batcher<number, Job>;
  /** The VM each key stands for while its queue runs (its node follows a migration). */
  private readonly vms = new Map<number, VmRef>();
  private readonly attempts: number;
  private readonly reader: VmReader;
  private readonly exec: ConfigExecutor;
  private readonly checks: AttachChecks;
  readonly fences: Fences;
  readonly index: DiskIndex;
  readonly content: ContentCache;

  constructor(private readonly o: QueueOptions) {
    this.attempts = o.attempts ?? 8;
    const confirmTimeoutMs = o.confirmTimeoutMs ?? 10_000;
    const maxAgeMs = o.indexMaxAgeMs ?? 5_000;
    this.fences = o.fences ?? new Fences();
    this.index = o.index ?? new DiskIndex(o.api, o.locator);
    this.content = o.content ?? new ContentCache(o.api, maxAgeMs);
    const { api, cluster, locator, log, taskTimeoutMs } = o;
    const index = this.index;
    this.reader = new VmReader({ api, cluster, locator, index, confirmTimeoutMs });
    const port = o.port;
    this.exec = new ConfigExecutor({ api, port, cluster, index, taskTimeoutMs, maxAgeMs });
    this.checks = new AttachChecks({ index, content: this.content, log, maxAgeMs, confirmTimeoutMs });
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
        await this.checks.recheck(
          vm,
          attaches.filter((j) => !j.done && j.landedSlot !== undefined),
          landed,
          (v, req) => this.withdraw(v, req),
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

  /** Detaches a disk this queue attached (an attach withdrawn); resolves with why it failed, if it did. */
  private async withdraw(vm: VmRef, req: DetachRequest): Promise<unknown> {
    const outcome: { failed?: unknown } = {};
    await this.detachBatch(vm, [internalDetach(req, outcome)]).catch((e: unknown) => (outcome.failed = e));
    return outcome.failed;
  }

  /** Why the open jobs are refused after the last attempt. */
  private exhausted(vm: VmRef): Error {
    return new Unavailable(
      `could not change the config of ${what(vm)} after ${this.attempts} attempts (lock contention or lost answers); retrying later`,
    );
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
        state = last ?? (await this.reader.read(vm));
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
      const plan = planDetach(vm, state.entries, requestsOf(open));
      open = answerPlanned(open, plan);
      if (open.length === 0) return;
      try {
        unlinks++;
        // With the digest of the read the plan came from: a slot another writer changed since
        // is refused, never detached (the disk now in it may be another one).
        await this.exec.unlink(vm, plan.unlink, state.entries, state.digest);
      } catch (e) {
        const failure = failureOf(e);
        if (failure === 'busy') {
          unlinks--;
          // A changed config is read again at once; a lock held elsewhere is waited out.
          await retryBusy(this.o.log, vm, attempt, e, 'detach', !digestRefused(e));
          continue;
        }
        if (failure === 'refused') {
          for (const j of open) j.reject(e);
          return;
        }
        // Sent without a known outcome, or failed: read, re-issue (a refused hot-unplug, e.g.
        // `hotplug problem`, leaves a pending delete).
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
        last = await this.reader.poll(vm, (en) => open.every((j) => detachKeys(vm.vmid, en, j.req).length === 0));
      } catch (e) {
        if (isCsiError(e, 'NotFound')) {
          for (const j of open) j.resolve();
          return;
        }
        throw e;
      }
    }
    const entries = last?.entries ?? (await this.reader.read(vm)).entries;
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
      const state = await this.reader.read(vm);
      const plan = planUpdate(vm, state.entries, requestsOf(open));
      open = answerPlanned(open, plan);
      if (open.length === 0) return;
      if (attempt > this.attempts) {
        const err = this.exhausted(vm);
        for (const j of open) j.reject(err);
        return;
      }
      try {
        await this.exec.change(
          vm,
          state.entries,
          { set: plan.set, digest: state.digest },
          'change drive options on',
          false,
        );
      } catch (e) {
        const failure = failureOf(e);
        if (failure === 'busy') {
          await retryBusy(this.o.log, vm, attempt, e, 'drive option change');
          continue;
        }
        if (failure === 'uncertain') continue;
        // Read back: qemu-server reports a value it could not hot-apply but keeps it pending.
        const after = (await this.reader.read(vm)).entries;
        if (
          open.every(
            (j) => !after.some((en) => en.pending !== undefined && updateSites(vm.vmid, [en], j.req).length > 0),
          )
        )
          for (const j of open) j.reject(e);
        return;
      }
      const { entries } = await this.reader.poll(vm, (en) => open.every((j) => updateLanded(vm.vmid, en, j.req)));
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
        this.reader.read(vm),
        check && attempt === 1 ? this.checks.precheck(vm, open) : undefined,
      ]);
      if (batch && attempt === 1) {
        const late = this.late<AttachJob>(vm, 'attach', batch);
        if (late.length) {
          jobs.push(...late);
          open.push(...late);
          if (check) await this.checks.precheck(vm, late);
        }
      }
      open = open.filter(isOpen);
      settle(vm, state.entries, requestsOf(open)).forEach((f, i) => {
        const j = open[i];
        if (f && j) this.settleFound(vm, j, f);
      });
      open = open.filter(isOpen);
      // A caller that gave up gets no new change sent; what was sent has been read back above.
      for (const j of open) if (j.abandoned) j.reject(new DeadlineExceeded('caller gave up; no further change sent'));
      open = open.filter(isOpen);
      if (open.length === 0) return landed;
      if (attempt > this.attempts) {
        const err = this.exhausted(vm);
        open.forEach((j) => j.reject(err));
        return landed;
      }

      // Plan: finish pending detaches of these disks first, then one change for all the rest.
      const plan = planAttach(vm, state.entries, requestsOf(open));
      plan.rejects.forEach((err, i) => open[i]?.reject(err));
      const assigned = new Map([...plan.assigned].map(([i, slot]) => [defined(open[i], 'a planned job'), slot]));
      open = open.filter(isOpen);
      if (open.length === 0) return landed;

      let applied: boolean;
      try {
        if (plan.unlink.length) {
          await this.exec.unlink(vm, plan.unlink, state.entries, state.digest);
          await this.reader.poll(vm, (en) => open.every((j) => obstacles(vm.vmid, en, j.req).length === 0));
          continue;
        }
        const sent = await this.exec.change(
          vm,
          state.entries,
          { set: plan.set, delete: plan.delete.length ? plan.delete : undefined, digest: state.digest },
          'attach disks to',
          open.some((j) => j.req.exclusive && !j.req.helper),
        );
        if (sent) landed = sent.landed;
        // Applied unless the VM keeps disk changes pending (no disk hot-plug): qemu-server fails
        // the task with `hotplug problem` when a hot-plug fails.
        applied = hotplugsDisks(state.entries);
        if (applied) this.index.applied(vm.vmid, plan.set, plan.delete);
      } catch (e) {
        const failure = failureOf(e);
        if (failure === 'busy') {
          await retryBusy(this.o.log, vm, attempt, e, 'attach');
          continue;
        }
        if (failure === 'uncertain') {
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
            await this.reader.poll(vm, (en) =>
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
