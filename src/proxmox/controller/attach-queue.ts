// One queue per VM for attaching and detaching disks. Proxmox lets one writer change a VM's
// config at a time and makes others wait on a lock, so concurrent publishes to a VM would
// race for the same free slot and time out on the lock. Instead, everything that arrives for a
// VM while its previous change is in flight is merged: one unlink for all detaches, one config
// change setting every new scsiN. Every step is confirmed by reading the config back, and
// every failure is followed by a read before anything is retried, because a failed call may
// still have taken effect.
import type { Logger } from 'pino';
import { AlreadyExists, Busy, DeadlineExceeded, FailedPrecondition, NotFound, ResourceExhausted, Unavailable, isCsiError } from '../../errors.js';
import type { ConfigEntry, ProxmoxApi } from '../api/api.js';
import { type DiskSite, driveHasOptions, freeSlots, isDriverSite, isHelperSite, otherBusKeysOf, sitesOf as allSitesOf, unusedOf, withDriveOptions } from './drives.js';
import { outcomeUncertain } from '../api/errors.js';
import { type DriveOptions, driveString } from './params.js';
import { helperWwnForSlot, wwnForSlot } from '../contract.js';
import { type FenceKind, Fences } from './fences.js';
import { type VmEntries, scanVms, usesOf } from './scan.js';
import { backoffDelay, sleep, waitTask } from '../api/tasks.js';
import type { VmLocator, VmRef } from './vm-locator.js';
import { diskOwner, volidOf } from '../volume-id.js';

/**
 * The disk's places on the VM that this driver may touch. A place it cannot have made (see
 * isDriverSite) is never read as "published", rewritten or unlinked.
 */
function sitesOf(entries: readonly ConfigEntry[], storage: string, disk: string, vmid: number): DiskSite[] {
  return allSitesOf(entries, storage, disk).filter((s) => isDriverSite(s, vmid, diskOwner(disk)));
}

/** The disk's places on the VM that are the VM's own (boot disk, disks attached by hand…). */
function foreignKeysOf(entries: readonly ConfigEntry[], storage: string, disk: string, vmid: number): string[] {
  const owner = diskOwner(disk);
  return [
    ...allSitesOf(entries, storage, disk).filter((s) => !isDriverSite(s, vmid, owner)).map((s) => s.key),
    ...otherBusKeysOf(entries, storage, disk),
  ];
}

const notOurs = (storage: string, disk: string, vm: VmRef, keys: string[]) =>
  new FailedPrecondition(`${volidOf(storage, disk)} is on VM ${vm.name} (${vm.vmid}) as ${keys.join(', ')}, which this driver did not attach (the VM's own disk or one attached by hand); it is never published to, changed on or detached from that VM by the driver`);

export interface AttachRequest {
  storage: string;
  disk: string;
  /** Proxmox node whose storage holds the disk. */
  diskNode: string;
  options: DriveOptions;
  /** Refuse when another VM has the disk (single-node access modes). */
  exclusive: boolean;
  /**
   * An offline-expansion helper attachment (helper WWN) rather than a publish. Each kind treats
   * the other's attachment of the same disk on the VM as an obstacle: a publish unlinks a helper
   * left over by a crash, a helper refuses to touch a publish.
   */
  helper?: boolean;
}

/**
 * An exclusive publish found only offline-expansion helper attachments of its disk on other
 * VMs: leftovers the caller can remove (through those VMs' queues) and then publish again.
 */
export class HelperLeftovers extends FailedPrecondition {
  constructor(message: string, readonly vms: VmRef[]) {
    super(message);
  }
}

export interface DetachRequest {
  storage: string;
  disk: string;
}

/** New option values for the disk's drive line(s) on this VM (a VolumeAttributesClass change). */
export interface UpdateRequest {
  storage: string;
  disk: string;
  /** Options to set; undefined removes one. */
  options: Record<string, string | undefined>;
}

export interface QueueOptions {
  api: ProxmoxApi;
  cluster: string;
  locator: VmLocator;
  log: Logger;
  /** How long a queue waits for company before its first change; default 5 ms. */
  mergeWindowMs?: number;
  /** Config changes tried per batch (lock timeouts, lost answers); default 8. */
  attempts?: number;
  /** How long a change may stay pending (hot-plug in progress) before it is an error; default 10 s. */
  confirmTimeoutMs?: number;
  taskTimeoutMs?: number;
  /** Shared with the cluster's other mutating paths; a private set by default. */
  fences?: Fences;
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
interface DetachJob extends JobBase { kind: 'detach'; req: DetachRequest; resolve(): void }
interface UpdateJob extends JobBase { kind: 'update'; req: UpdateRequest; resolve(): void }
type Job = AttachJob | DetachJob | UpdateJob;

const isOpen = (j: AttachJob): boolean => !j.done && j.landedSlot === undefined;

interface VmState {
  digest?: string | undefined;
  entries: ConfigEntry[];
}

export class AttachQueues {
  private readonly queues = new Map<number, { vm: VmRef; jobs: Job[] }>();
  private readonly attempts: number;
  private readonly confirmTimeoutMs: number;
  readonly fences: Fences;

  constructor(private readonly o: QueueOptions) {
    this.attempts = o.attempts ?? 8;
    this.confirmTimeoutMs = o.confirmTimeoutMs ?? 10_000;
    this.fences = o.fences ?? new Fences();
  }

  /**
   * Attaches the disk to the VM (or finds it attached); resolves with its slot. Refused with
   * ABORTED while another VM has a change of the disk that may still land.
   */
  attach(vm: VmRef, req: AttachRequest, signal?: AbortSignal): Promise<number> {
    const volid = volidOf(req.storage, req.disk);
    try {
      this.fences.check(volid, `${req.helper ? 'expanding' : 'publishing'} ${volid} to ${this.what(vm)}`, vm.vmid);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.enqueue(vm, volid, req.helper ? 'helper-attach' : 'attach', signal, (resolve, reject) => ({ kind: 'attach', req, done: false, taken: false, abandoned: false, resolve, reject }));
  }

  /** Detaches the disk from the VM, leaving no pending or unused entry of it behind. */
  detach(vm: VmRef, req: DetachRequest, signal?: AbortSignal): Promise<void> {
    return this.enqueue(vm, volidOf(req.storage, req.disk), 'detach', signal, (resolve, reject) => ({ kind: 'detach', req, done: false, taken: false, abandoned: false, resolve, reject }));
  }

  /** Rewrites the disk's drive line in place (a no-op when the VM does not have it attached). */
  update(vm: VmRef, req: UpdateRequest, signal?: AbortSignal): Promise<void> {
    return this.enqueue(vm, volidOf(req.storage, req.disk), 'modify', signal, (resolve, reject) => ({ kind: 'update', req, done: false, taken: false, abandoned: false, resolve, reject }));
  }

  private enqueue<T>(vm: VmRef, volid: string, kind: FenceKind, signal: AbortSignal | undefined, make: (res: (v: T) => void, rej: (e: unknown) => void) => Job): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (signal?.aborted) return reject(new DeadlineExceeded('cancelled before the VM config was changed'));
      // The fence lives as long as the job, not as long as its caller (fences.ts).
      const lift = this.fences.hold(volid, kind, vm);
      let answered = false;
      const answer = (f: () => void) => {
        if (answered) return;
        answered = true;
        signal?.removeEventListener('abort', onAbort);
        f();
      };
      const job = make(
        (v) => {
          if (job.done) return;
          job.done = true;
          lift();
          answer(() => resolve(v));
        },
        (e) => {
          if (job.done) return;
          job.done = true;
          lift({ uncertainSince: job.uncertainSince });
          answer(() => reject(e));
        },
      );
      const onAbort = () => {
        if (!job.taken) {
          // Never sent: proven not to land.
          const q = this.queues.get(vm.vmid);
          if (q) q.jobs = q.jobs.filter((j) => j !== job);
          job.reject(new DeadlineExceeded('cancelled before the VM config was changed'));
          return;
        }
        job.abandoned = true;
        answer(() => reject(new DeadlineExceeded(`gave up waiting for the config change of ${this.what(vm)}; a change already sent runs to its outcome in the background and ${volid} stays fenced until then`)));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const q = this.queues.get(vm.vmid);
      if (q) {
        q.jobs.push(job);
        return;
      }
      this.queues.set(vm.vmid, { vm: { ...vm }, jobs: [job] });
      void this.drain(vm.vmid);
    });
  }

  private async drain(vmid: number): Promise<void> {
    const q = this.queues.get(vmid)!;
    try {
      while (q.jobs.length > 0) {
        await sleep(this.o.mergeWindowMs ?? 5);
        const jobs = q.jobs.splice(0).filter((j) => !j.done);
        if (jobs.length === 0) continue;
        for (const j of jobs) j.taken = true;
        this.o.log.debug({ vmid, vm: q.vm.name, attach: jobs.filter((j) => j.kind === 'attach').length, detach: jobs.filter((j) => j.kind === 'detach').length }, 'VM config batch');
        try {
          const detaches = jobs.filter((j): j is DetachJob => j.kind === 'detach');
          const attaches = jobs.filter((j): j is AttachJob => j.kind === 'attach');
          if (detaches.length) await this.detachBatch(q.vm, detaches);
          if (attaches.length) {
            await this.attachBatch(q.vm, attaches, true);
            await this.recheck(q.vm, attaches.filter((j) => !j.done && j.landedSlot !== undefined));
          }
          const updates = jobs.filter((j): j is UpdateJob => j.kind === 'update' && !j.done);
          if (updates.length) await this.updateBatch(q.vm, updates);
        } catch (e) {
          for (const j of jobs) j.reject(e);
        }
      }
    } finally {
      this.queues.delete(vmid);
    }
  }

  private what(vm: VmRef): string {
    return `VM ${vm.name} (${vm.vmid}) on ${vm.node}`;
  }

  /** Config (for its digest) and pending entries; follows a VM that migrated to another node. */
  private async readState(vm: VmRef, withDigest: boolean): Promise<VmState> {
    for (let moved = false; ; moved = true) {
      try {
        if (!withDigest) return { entries: await this.o.api.vmPending(vm.node, vm.vmid) };
        const [cfg, entries] = await Promise.all([this.o.api.vmConfig(vm.node, vm.vmid), this.o.api.vmPending(vm.node, vm.vmid)]);
        return { digest: cfg.digest || undefined, entries };
      } catch (e) {
        if (!isCsiError(e, 'NotFound') || moved) throw e;
        const now = await this.o.locator.byVmid(vm.vmid);
        if (!now) throw new NotFound(`VM ${vm.name} (${vm.vmid}) no longer exists in Proxmox cluster ${this.o.cluster}`, { cause: e });
        if (now.node === vm.node) throw e;
        vm.node = now.node;
      }
    }
  }

  /** Re-reads until `done(entries)` or the confirm timeout; returns the last entries read. */
  private async poll(vm: VmRef, done: (entries: ConfigEntry[]) => boolean): Promise<ConfigEntry[]> {
    const deadline = Date.now() + this.confirmTimeoutMs;
    let delay = 25;
    for (;;) {
      const { entries } = await this.readState(vm, false);
      if (done(entries) || Date.now() + delay > deadline) return entries;
      await sleep(delay);
      delay = Math.min(delay * 2, 1_000);
    }
  }

  private async detachBatch(vm: VmRef, jobs: DetachJob[]): Promise<void> {
    const keysOf = (entries: ConfigEntry[], j: DetachJob): string[] => [
      ...sitesOf(entries, j.req.storage, j.req.disk, vm.vmid).map((s) => s.key),
      // Deleting unusedN frees the disk when this VM owns it; only drop foreign leftovers.
      ...(diskOwner(j.req.disk) !== vm.vmid ? unusedOf(entries, j.req.storage, j.req.disk) : []),
    ];
    let open = jobs;
    let last: ConfigEntry[] | undefined;
    let unlinks = 0;
    let lastErr: unknown;
    for (let attempt = 1; attempt <= this.attempts && unlinks < DETACH_UNLINKS; attempt++) {
      let entries: ConfigEntry[];
      try {
        entries = last ?? (await this.readState(vm, false)).entries;
      } catch (e) {
        if (isCsiError(e, 'NotFound')) return open.forEach((j) => j.resolve());
        throw e;
      }
      last = undefined;
      for (const j of open) {
        const foreign = foreignKeysOf(entries, j.req.storage, j.req.disk, vm.vmid);
        if (foreign.length) j.reject(notOurs(j.req.storage, j.req.disk, vm, foreign));
        else if (keysOf(entries, j).length === 0) j.resolve();
      }
      open = open.filter((j) => !j.done);
      if (open.length === 0) return;
      const keys = [...new Set(open.flatMap((j) => keysOf(entries, j)))];
      try {
        unlinks++;
        await this.o.api.unlinkDisks(vm.node, vm.vmid, keys);
      } catch (e) {
        if (isCsiError(e, 'Aborted')) {
          unlinks--;
          this.o.log.info({ vmid: vm.vmid, attempt, err: (e as Error).message }, 'VM busy, retrying detach');
          await sleep(backoffDelay(attempt));
          continue;
        }
        // A refused hot-unplug (e.g. `hotplug problem`) leaves a pending delete: read, re-issue.
        if (isCsiError(e, 'FailedPrecondition')) return open.forEach((j) => j.reject(e));
        lastErr = e;
        continue;
      }
      try {
        last = await this.poll(vm, (en) => open.every((j) => keysOf(en, j).length === 0));
      } catch (e) {
        if (isCsiError(e, 'NotFound')) return open.forEach((j) => j.resolve());
        throw e;
      }
    }
    const entries = last ?? (await this.readState(vm, false)).entries;
    for (const j of open) {
      const keys = keysOf(entries, j);
      if (keys.length === 0) j.resolve();
      else {
        const why = lastErr ? `: ${(lastErr as Error).message}` : '';
        j.reject(new Unavailable(`${volidOf(j.req.storage, j.req.disk)} is still on ${this.what(vm)} as ${keys.join(', ')} (pending delete: hot-unplug did not complete${why}); retrying later`));
      }
    }
  }

  /**
   * One config change for every drive line to rewrite. qemu-server applies backup and throttle
   * options of an attached disk at once (throttling through QEMU); a value that stays pending
   * would only take effect at the VM's next start, so that is reported, not taken as success.
   */
  private async updateBatch(vm: VmRef, jobs: UpdateJob[]): Promise<void> {
    const sitesFor = (entries: ConfigEntry[], j: UpdateJob) => sitesOf(entries, j.req.storage, j.req.disk, vm.vmid).filter((s) => !isHelperSite(s));
    let open = jobs;
    for (let attempt = 1; open.length > 0; attempt++) {
      const state = await this.readState(vm, true);
      const set: Record<string, string> = {};
      for (const j of open) {
        const foreign = foreignKeysOf(state.entries, j.req.storage, j.req.disk, vm.vmid);
        if (foreign.length) {
          j.reject(notOurs(j.req.storage, j.req.disk, vm, foreign));
          continue;
        }
        const sites = sitesFor(state.entries, j);
        const moving = sites.find((s) => s.placement !== 'attached');
        if (moving) {
          j.reject(new Unavailable(`${volidOf(j.req.storage, j.req.disk)} is ${moving.placement === 'attaching' ? 'being attached to' : 'being detached from'} ${this.what(vm)} (${moving.key} has a pending change); retrying later`));
          continue;
        }
        const stale = sites.filter((s) => !driveHasOptions(s.drive, j.req.options));
        if (stale.length === 0) j.resolve();
        for (const s of stale) {
          const raw = state.entries.find((e) => e.key === s.key)?.value ?? '';
          set[s.key] = withDriveOptions(raw, j.req.options);
        }
      }
      open = open.filter((j) => !j.done);
      if (open.length === 0) return;
      if (attempt > this.attempts) {
        const err = new Unavailable(`could not change the config of ${this.what(vm)} after ${this.attempts} attempts (lock contention or lost answers); retrying later`);
        return open.forEach((j) => j.reject(err));
      }
      try {
        const upid = await this.o.api.updateVmConfig(vm.node, vm.vmid, { set, digest: state.digest });
        if (upid) await waitTask(this.o.api, vm.node, upid, { cluster: this.o.cluster, what: `change drive options on ${this.what(vm)}`, timeoutMs: this.o.taskTimeoutMs });
      } catch (e) {
        if (isCsiError(e, 'Aborted')) {
          this.o.log.info({ vmid: vm.vmid, attempt, err: (e as Error).message }, 'VM busy, retrying drive option change');
          await sleep(backoffDelay(attempt));
          continue;
        }
        if (outcomeUncertain(e)) continue;
        // Read back: qemu-server reports a value it could not hot-apply but keeps it pending.
        const after = (await this.readState(vm, false)).entries;
        if (open.every((j) => !after.some((en) => en.pending !== undefined && sitesFor([en], j).length > 0))) return open.forEach((j) => j.reject(e));
      }
      const entries = await this.poll(vm, (en) => open.every((j) => sitesFor(en, j).every((s) => s.placement === 'attached' && driveHasOptions(s.drive, j.req.options))));
      for (const j of open) {
        const sites = sitesFor(entries, j);
        if (sites.every((s) => s.placement === 'attached' && driveHasOptions(s.drive, j.req.options))) j.resolve();
        else if (sites.some((s) => entries.find((e) => e.key === s.key)?.pending !== undefined)) {
          j.reject(new FailedPrecondition(`the new options of ${volidOf(j.req.storage, j.req.disk)} stay a pending change of ${this.what(vm)} (${sites.map((s) => s.key).join(', ')}): Proxmox applies them only when the VM restarts`));
        }
      }
      open = open.filter((j) => !j.done);
    }
  }

  /** The attachment of the disk on this VM that satisfies the job, if one is there. */
  private attachedFor(vm: VmRef, entries: ConfigEntry[], j: AttachJob): DiskSite | undefined {
    return sitesOf(entries, j.req.storage, j.req.disk, vm.vmid).find((s) => s.placement === 'attached' && isHelperSite(s) === !!j.req.helper);
  }

  /** Sites of the disk on this VM that must be unlinked before the job can be attached. */
  private obstacles(vm: VmRef, entries: ConfigEntry[], j: AttachJob): DiskSite[] {
    return sitesOf(entries, j.req.storage, j.req.disk, vm.vmid).filter((s) => s.placement === 'detaching' || isHelperSite(s) !== !!j.req.helper);
  }

  private settleAttached(vm: VmRef, j: AttachJob, site: DiskSite): void {
    if (j.req.helper) return j.resolve(site.slot);
    const ro = site.drive.options.ro === '1' || site.drive.options.ro === 'on';
    if (ro !== j.req.options.readonly) {
      j.reject(new AlreadyExists(`${volidOf(j.req.storage, j.req.disk)} is already published to ${this.what(vm)} with readonly=${ro}; unpublish it first`));
      return;
    }
    if (site.drive.options.wwn && site.drive.options.wwn.toLowerCase() !== wwnForSlot(site.slot)) {
      this.o.log.warn({ vmid: vm.vmid, key: site.key, wwn: site.drive.options.wwn }, 'disk is attached with a WWN other than its slot\'s (attached by hand?); the node looks for the slot\'s WWN and may not find it');
    }
    if (j.req.exclusive) j.landedSlot = site.slot;
    else j.resolve(site.slot);
  }

  /**
   * After exclusive attaches landed: read the other VMs again. The fence keeps two of this
   * process's attaches of a disk from being in flight together, so a disk found elsewhere now
   * was put there by a change this process did not make (a previous run's change that waited
   * for a lock, a person). Deterministic resolution: the attach that sees a competitor after
   * landing withdraws (unlinked and verified gone) and is refused; the other one stays. A
   * competitor that is another live attach sees this one and withdraws too: neither stays,
   * both callers retry with their backoff, and the first to land alone wins.
   */
  private async recheck(vm: VmRef, landed: AttachJob[]): Promise<void> {
    if (landed.length === 0) return;
    const scan = await scanVms(this.o.api, this.o.locator, { nodes: [...new Set(landed.map((j) => j.req.diskNode))], exclude: [vm.vmid] });
    for (const j of landed) {
      const conflict = conflictOf(scan, j.req);
      if (!conflict) {
        j.resolve(j.landedSlot!);
        continue;
      }
      this.o.log.warn({ vmid: vm.vmid, disk: volidOf(j.req.storage, j.req.disk), err: conflict.message }, 'disk appeared on another VM while it was attached here; withdrawing this attachment');
      let failed: unknown;
      await this.detachBatch(vm, [{
        kind: 'detach', req: { storage: j.req.storage, disk: j.req.disk }, done: false, taken: true, abandoned: false,
        resolve() { this.done = true; },
        reject(e: unknown) { this.done = true; failed = e; },
      }]).catch((e: unknown) => (failed = e));
      const Kind = conflict instanceof HelperLeftovers ? Busy : FailedPrecondition;
      j.reject(failed
        ? new Unavailable(`${conflict.message}; this attachment to ${this.what(vm)} was withdrawn but the unlink did not complete (${(failed as Error).message}); retrying later`)
        : new Kind(`${conflict.message} (it appeared there while this attach to ${this.what(vm)} was landing; this one was withdrawn)`));
    }
  }

  /** Refuses disks that do not exist or that another VM holds (exclusive requests). */
  private async precheck(vm: VmRef, jobs: AttachJob[]): Promise<void> {
    const groups = new Map<string, AttachJob[]>();
    for (const j of jobs) {
      const k = `${j.req.diskNode}\u0000${j.req.storage}\u0000${diskOwner(j.req.disk) ?? ''}`;
      groups.set(k, [...(groups.get(k) ?? []), j]);
    }
    const exclusive = jobs.filter((j) => j.req.exclusive);
    const [, scan] = await Promise.all([
      Promise.all([...groups.values()].map(async (g) => {
        const { diskNode, storage, disk } = g[0]!.req;
        const items = await this.o.api.listContent(diskNode, storage, diskOwner(disk));
        const have = new Set(items.map((i) => i.volid));
        for (const j of g) {
          if (!have.has(volidOf(j.req.storage, j.req.disk))) {
            j.reject(new NotFound(`volume ${volidOf(j.req.storage, j.req.disk)} does not exist on ${j.req.diskNode}`));
          }
        }
      })),
      exclusive.length === 0 ? [] : scanVms(this.o.api, this.o.locator, {
        nodes: [...new Set(exclusive.map((j) => j.req.diskNode))],
        // The disk's owner VM too: its own disks are never attached elsewhere (defect 3).
        exclude: [vm.vmid],
      }),
    ]);
    for (const j of exclusive) {
      if (j.done) continue;
      const conflict = conflictOf(scan, j.req);
      if (conflict) j.reject(conflict);
    }
  }

  private async attachBatch(vm: VmRef, jobs: AttachJob[], check: boolean): Promise<void> {
    let open = jobs.filter((j) => !j.done);
    for (let attempt = 1; open.length > 0; attempt++) {
      const [state] = await Promise.all([this.readState(vm, true), check && attempt === 1 ? this.precheck(vm, open) : undefined]);
      open = open.filter(isOpen);
      for (const j of open) {
        const foreign = foreignKeysOf(state.entries, j.req.storage, j.req.disk, vm.vmid);
        if (foreign.length) {
          j.reject(notOurs(j.req.storage, j.req.disk, vm, foreign));
          continue;
        }
        const site = this.attachedFor(vm, state.entries, j);
        if (site) this.settleAttached(vm, j, site);
      }
      open = open.filter(isOpen);
      // A caller that gave up gets no new change sent; what was sent has been read back above.
      for (const j of open) if (j.abandoned) j.reject(new DeadlineExceeded('caller gave up; no further change sent'));
      open = open.filter(isOpen);
      if (open.length === 0) return;
      if (attempt > this.attempts) {
        const err = new Unavailable(`could not change the config of ${this.what(vm)} after ${this.attempts} attempts (lock contention or lost answers); retrying later`);
        return open.forEach((j) => j.reject(err));
      }

      // Plan: finish pending detaches of these disks first, then one change for all the rest.
      const free = freeSlots(state.entries);
      const set: Record<string, string> = {};
      const del: string[] = [];
      const unlink: string[] = [];
      const assigned = new Map<AttachJob, number>();
      for (const j of open) {
        const sites = sitesOf(state.entries, j.req.storage, j.req.disk, vm.vmid);
        const leaving = this.obstacles(vm, state.entries, j);
        if (j.req.helper && leaving.some((s) => !isHelperSite(s) && s.placement !== 'detaching')) {
          j.reject(new Busy(`${volidOf(j.req.storage, j.req.disk)} is being published to ${this.what(vm)}; not expanding it through a helper attachment now`));
          continue;
        }
        if (leaving.length) {
          unlink.push(...leaving.map((s) => s.key));
          continue;
        }
        const slot = sites.find((s) => s.placement === 'attaching')?.slot ?? free.shift();
        if (slot === undefined) {
          j.reject(new ResourceExhausted(`no free SCSI slot on ${this.what(vm)}: scsi1..scsi30 are all in use or pending`));
          continue;
        }
        set[`scsi${slot}`] = driveString(j.req.storage, j.req.disk, j.req.options, j.req.helper ? helperWwnForSlot(slot) : wwnForSlot(slot));
        if (diskOwner(j.req.disk) !== vm.vmid) del.push(...unusedOf(state.entries, j.req.storage, j.req.disk));
        assigned.set(j, slot);
      }
      open = open.filter(isOpen);
      if (open.length === 0) return;

      try {
        if (unlink.length) {
          await this.o.api.unlinkDisks(vm.node, vm.vmid, [...new Set(unlink)]);
          await this.poll(vm, (en) => open.every((j) => this.obstacles(vm, en, j).length === 0));
          continue;
        }
        const upid = await this.o.api.updateVmConfig(vm.node, vm.vmid, { set, delete: del.length ? del : undefined, digest: state.digest });
        if (upid) await waitTask(this.o.api, vm.node, upid, { cluster: this.o.cluster, what: `attach disks to ${this.what(vm)}`, timeoutMs: this.o.taskTimeoutMs });
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
          for (const j of open) await this.attachBatch(vm, [j], false);
          return;
        }
        return open.forEach((j) => j.reject(e));
      }

      const entries = await this.poll(vm, (en) => open.every((j) => this.attachedFor(vm, en, j) || sitesOf(en, j.req.storage, j.req.disk, vm.vmid).length === 0));
      for (const j of open) {
        const sites = sitesOf(entries, j.req.storage, j.req.disk, vm.vmid);
        const site = this.attachedFor(vm, entries, j);
        if (site) this.settleAttached(vm, j, site);
        else if (sites.some((s) => s.placement === 'attaching')) {
          j.reject(new Unavailable(`hot-plug of ${volidOf(j.req.storage, j.req.disk)} into ${this.what(vm)} did not complete; it stays a pending change of scsi${assigned.get(j)}`));
        }
      }
      open = open.filter(isOpen);
    }
  }
}

/** Why another VM's use of the disk forbids attaching it (exclusive), or undefined. */
function conflictOf(scan: readonly VmEntries[], req: AttachRequest): Error | undefined {
  const volid = volidOf(req.storage, req.disk);
  const use = usesOf(scan, req.storage, req.disk);
  const own = use.otherBus[0];
  if (own) {
    return new FailedPrecondition(`${volid} is ${own.key} of VM ${own.vm.name} (${own.vm.vmid}) on ${own.vm.node}, a disk of that VM; it is never attached to another VM`);
  }
  const other = use.sites.find((s) => !isHelperSite(s.site));
  if (other) {
    const how = other.site.placement === 'attached' ? 'attached' : other.site.placement === 'attaching' ? 'being attached' : 'still being detached';
    const msg = `${volid} is ${how} as ${other.site.key} of VM ${other.vm.name} (${other.vm.vmid}) on ${other.vm.node}; a single-node volume is published to one node at a time`;
    return new FailedPrecondition(msg);
  }
  if (use.sites.length > 0) {
    const vms = [...new Map(use.sites.map((s) => [s.vm.vmid, { vmid: s.vm.vmid, node: s.vm.node, name: s.vm.name }])).values()];
    return new HelperLeftovers(
      `${volid} is still attached to ${vms.map((v) => `VM ${v.name} (${v.vmid})`).join(', ')} by an interrupted offline expansion; remove that attachment first`,
      vms,
    );
  }
  return undefined;
}
