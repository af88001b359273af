// The move itself: a state machine over the record's steps. Every step first looks at what is
// really there (Proxmox, the API server) and only then acts, so a run that died anywhere —
// between a call and its record update included — is continued by the next run. Until the
// migration has moved the disk, a failure rolls back (the helper lets go of the disk on the
// source, the PV gets its reclaim policy back, the record goes); after that the only safe
// direction is forward, and a re-run finishes the move.
import { isCsiError } from '../../errors.js';
import {
  MoverVm,
  isOwnershipRefusal,
  parseVolid,
  parseVolumeId,
  volidOf,
  type MoverApi,
  type MoverReadApi,
} from '../../proxmox/index.js';
import type { MoveKube, PersistentVolume, PersistentVolumeClaim } from './kube-port.js';
import { buildClaim, buildReplacementPv, targetHandle } from './objects.js';
import { MOVED_FROM_KEY, type MoveRecord, RECORD_KEY, type Step, recordPatch, stepIndex } from './record.js';
import { Refusal } from './refusal.js';

export interface MoveDeps {
  kube: MoveKube;
  /** Held read-only by the run; its changes go through the helper's gated port (mover-vm.ts). */
  api: MoverApi;
  region: string;
  vmid: number;
  log: (line: string) => void;
  signal?: AbortSignal;
  /** How long to wait for the PV controller to bind the recreated claim (default 120 s). */
  bindTimeoutMs?: number;
  migrateTimeoutMs?: number;
  /** Test hook (failpoints): awaited before and after every change. */
  checkpoint?: (name: string) => Promise<void>;
}

/** The move failed and was rolled back: nothing changed (exit code 1). */
export class MoveRolledBack extends Error {}
/** The move is under way but cannot finish now (e.g. the bind takes longer): run it again. */
export class MoveIncomplete extends Error {}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const errText = (e: unknown) => (e instanceof Error ? e.message : String(e));
const isConflict = (e: unknown) => (e as { status?: number }).status === 409;

export class MoveRun {
  private readonly mover: MoverVm;
  /** The deps with the API read-only by type: every change is the mover's, through the gate. */
  private readonly d: Omit<MoveDeps, 'api'> & { api: MoverReadApi };
  /** Steps this run completed, for the report. */
  readonly done: string[] = [];

  constructor(
    deps: MoveDeps,
    private r: MoveRecord,
  ) {
    const d = deps;
    this.d = deps;
    this.mover = new MoverVm({
      api: deps.api,
      cluster: d.region,
      vmid: d.vmid,
      log: d.log,
      ...(d.signal && { signal: d.signal }),
      ...(d.migrateTimeoutMs && { migrateTimeoutMs: d.migrateTimeoutMs }),
    });
  }

  get record(): MoveRecord {
    return this.r;
  }

  private async cp(name: string): Promise<void> {
    if (this.d.checkpoint) await this.d.checkpoint(name);
  }

  private get src() {
    const v = parseVolumeId(this.r.from);
    if (!v) throw new Error(`the record's source handle ${this.r.from} is not region/zone/storage/disk`);
    return { node: v.zone, storage: v.storage, volid: volidOf(v.storage, v.disk) };
  }

  /** Writes the record on every PV that carries it (the old one until it is deleted, the new one once it exists). */
  private async save(step: Step, changes: Partial<MoveRecord> = {}): Promise<void> {
    const next: MoveRecord = { ...this.r, ...changes, step };
    await this.cp(`save:${step}`);
    const old = await this.d.kube.getPv(this.r.oldPv);
    if (old && stepIndex(step) < stepIndex('done')) await this.d.kube.patchPv(this.r.oldPv, recordPatch(next));
    if (stepIndex(step) >= stepIndex('pv-created') && (await this.d.kube.getPv(this.r.newPv))) {
      await this.d.kube.patchPv(this.r.newPv, recordPatch(next));
    }
    this.r = next;
    this.done.push(step);
    this.d.log(`step ${step} recorded`);
  }

  /**
   * First step: the old PV keeps the disk whatever happens to the claim, and carries the record.
   * Only if the PV is still as planned (`resourceVersion`): a second move started at the same
   * time loses here instead of running alongside.
   */
  async begin(resourceVersion?: string): Promise<void> {
    await this.cp('retain:before');
    try {
      await this.d.kube.patchPv(
        this.r.oldPv,
        { spec: { persistentVolumeReclaimPolicy: 'Retain' }, ...recordPatch(this.r) },
        resourceVersion,
      );
    } catch (e) {
      if (isConflict(e))
        throw new Refusal(
          'pv-changed',
          `PV ${this.r.oldPv} changed since it was read (another move of this claim starting?); run move again`,
        );
      throw e;
    }
    this.done.push('planned');
    this.d.log(`PV ${this.r.oldPv}: reclaimPolicy Retain, move recorded`);
  }

  /** The work after each recorded step; each records the next step (or sends the run back one). */
  private readonly after: Record<Exclude<Step, 'done'>, () => Promise<void>> = {
    planned: () => this.hold(),
    holding: () => this.startMigration(),
    migrating: () => this.awaitMigration(),
    migrated: () => this.release(),
    released: () => this.deleteClaim(),
    'claim-deleted': () => this.createPv(),
    'pv-created': () => this.createClaim(),
    'claim-created': () => this.awaitBind(),
    bound: () => this.finish(),
  };

  async run(): Promise<void> {
    while (this.r.step !== 'done') await this.after[this.r.step]();
  }

  private async hold(): Promise<void> {
    await this.cp('hold:before');
    await this.mover.hold(this.src.node, this.src.volid);
    await this.save('holding');
  }

  private async startMigration(): Promise<void> {
    const st = await this.mover.state();
    if (st && st.node === this.r.toZone) return this.migrated(); // started by a run that died before recording it
    if (st?.lock === 'migrate') {
      // a migration task of a run that died before recording its UPID: wait for it to end
      await this.waitUnlocked();
      return;
    }
    if (!st) {
      // the helper is gone: either rolled back, or never made — hold again
      this.r = { ...this.r, step: 'planned' };
      return;
    }
    await this.cp('migrate:before');
    const upid = await this.mover.startMigration(this.src.node, this.r.toZone, this.src.volid);
    await this.cp('migrate:after');
    await this.save('migrating', { upid });
  }

  private async waitUnlocked(): Promise<void> {
    const end = Date.now() + (this.d.migrateTimeoutMs ?? 6 * 3600_000);
    for (;;) {
      const st = await this.mover.state();
      if (!st || st.lock !== 'migrate') return;
      if (Date.now() > end)
        throw new MoveIncomplete(`helper VM ${this.d.vmid} is still migrating; run move again later`);
      await sleep(1000);
    }
  }

  private async awaitMigration(): Promise<void> {
    let failure: unknown;
    try {
      if (!this.r.upid) throw new Error('no migration task recorded');
      const log = await this.mover.finishMigration(this.r.upid, this.src.node);
      for (const l of log.filter((x) => /is '.*' on the target|already exists/.test(x))) this.d.log(`proxmox: ${l}`);
    } catch (e) {
      if (isCsiError(e, 'NotFound') && /no such task/i.test(errText(e)))
        failure = undefined; // task list rotated: judge by state
      else failure = e;
    }
    const st = await this.mover.state();
    if (st && st.node === this.r.toZone) {
      if (failure)
        this.d.log(
          `proxmox: the migration reported ${errText(failure)}, but the disk is on ${this.r.toZone}; continuing`,
        );
      return this.migrated();
    }
    if (st?.lock === 'migrate') return this.waitUnlocked();
    // still on the source: the migration did not happen (PVE freed any partial copy)
    await this.rollback(
      `the Proxmox migration failed: ${failure ? errText(failure) : 'the helper VM is still on the source'}`,
    );
  }

  /** The helper is on the target: record where the disk landed (Proxmox may have renamed it). */
  private async migrated(): Promise<void> {
    const st = await this.mover.state();
    const targetVolid = st?.volids.find((v) => !v.endsWith('-pve-nfs-csi-released')) ?? this.r.targetVolid;
    const disk = targetVolid === undefined ? undefined : parseVolid(targetVolid)?.disk;
    if (!targetVolid || !disk)
      throw new Error(
        `helper VM ${this.d.vmid} on ${this.r.toZone} holds no disk; the record says ${this.src.volid} was moved`,
      );
    const leftover = (
      await this.d.api.listContent(this.src.node, this.src.storage, undefined, { signal: this.d.signal })
    ).some((c) => c.volid === this.src.volid)
      ? this.src.volid
      : undefined;
    if (leftover)
      this.d.log(`proxmox left the source copy ${leftover} on ${this.src.node}; it is freed after the bind`);
    await this.save('migrated', {
      targetVolid,
      to: targetHandle(this.r.from, this.r.toZone, disk),
      ...(leftover && { leftover }),
    });
  }

  private async release(): Promise<void> {
    await this.cp('release:before');
    if (!this.r.targetVolid) throw new Error('no target volume recorded');
    await this.mover.release(this.r.targetVolid);
    await this.save('released');
  }

  private async deleteClaim(): Promise<void> {
    const { namespace, name } = this.r.claim;
    const pvc = await this.d.kube.getPvc(namespace, name);
    if (pvc && pvc.metadata.uid !== this.r.savedClaim.uid) {
      if (pvc.spec.volumeName === this.r.newPv) return this.save('claim-deleted'); // ours, from a later step
      throw new MoveIncomplete(
        `a different claim ${namespace}/${name} (UID ${pvc.metadata.uid}) exists now; the disk is on ${this.r.toZone} as ${this.r.to}, recorded on PV ${this.r.oldPv}. Delete that claim and run move again`,
      );
    }
    if (pvc) {
      await this.cp('delete-claim:before');
      await this.d.kube.deletePvc(namespace, name, this.r.savedClaim.uid);
      await this.cp('delete-claim:after');
      await this.awaitClaimGone(pvc);
    }
    await this.save('claim-deleted');
  }

  /**
   * kubernetes.io/pvc-protection holds a deleted claim while a pod uses it. No pod does (checked
   * before the move, and the claim's pods cannot start while the volume's disk is elsewhere), so
   * when the protection controller is slow or absent the finalizer is taken off here.
   */
  private async awaitClaimGone(pvc: PersistentVolumeClaim): Promise<void> {
    const { namespace, name } = this.r.claim;
    const end = Date.now() + 30_000;
    for (let i = 0; ; i++) {
      const cur = await this.d.kube.getPvc(namespace, name);
      if (!cur || cur.metadata.uid !== pvc.metadata.uid) return;
      if (i === 20 || Date.now() > end) {
        const users = (await this.d.kube.listPods(namespace)).filter(
          (p) =>
            (p.spec.volumes ?? []).some((v) => v.persistentVolumeClaim?.claimName === name) &&
            p.status?.phase !== 'Succeeded' &&
            p.status?.phase !== 'Failed',
        );
        if (users.length > 0)
          throw new MoveIncomplete(
            `claim ${namespace}/${name} is being deleted but pod ${users.map((p) => p.metadata.name).join(', ')} uses it: stop it and run move again`,
          );
        await this.d.kube.patchPvc(namespace, name, { metadata: { finalizers: null } });
      }
      await sleep(250);
    }
  }

  private async createPv(): Promise<void> {
    const old = await this.d.kube.getPv(this.r.oldPv);
    const existing = await this.d.kube.getPv(this.r.newPv);
    if (!existing) {
      if (!old)
        throw new Error(
          `PV ${this.r.oldPv} and its replacement ${this.r.newPv} are both gone; the disk is ${this.r.to}`,
        );
      await this.cp('create-pv:before');
      try {
        await this.d.kube.createPv(buildReplacementPv(old, { ...this.r, step: 'pv-created' }));
      } catch (e) {
        if (!isConflict(e)) throw e;
      }
      await this.cp('create-pv:after');
    } else if (existing.metadata.annotations?.[MOVED_FROM_KEY] !== this.r.oldPv) {
      throw new MoveIncomplete(
        `PV ${this.r.newPv} exists and is not this move's replacement (moved-from: ${existing.metadata.annotations?.[MOVED_FROM_KEY] ?? 'none'})`,
      );
    }
    await this.save('pv-created');
  }

  private async createClaim(): Promise<void> {
    const { namespace, name } = this.r.claim;
    let pvc = await this.d.kube.getPvc(namespace, name);
    if (pvc && pvc.spec.volumeName !== this.r.newPv) {
      throw new MoveIncomplete(
        `a claim ${namespace}/${name} that is not this move's exists (volumeName ${pvc.spec.volumeName ?? 'unset'}); the disk waits in PV ${this.r.newPv}. Delete that claim and run move again`,
      );
    }
    if (!pvc) {
      await this.cp('create-claim:before');
      try {
        pvc = await this.d.kube.createPvc(buildClaim(this.r));
      } catch (e) {
        if (!isConflict(e)) throw e;
        pvc = await this.d.kube.getPvc(namespace, name);
      }
      await this.cp('create-claim:after');
    }
    if (!pvc?.metadata.uid) throw new MoveIncomplete(`claim ${namespace}/${name} was not created; run move again`);
    await this.save('claim-created', { newClaimUid: pvc.metadata.uid });
  }

  private async awaitBind(): Promise<void> {
    const { namespace, name } = this.r.claim;
    const pv = await this.d.kube.getPv(this.r.newPv);
    const pvc = await this.d.kube.getPvc(namespace, name);
    if (!pv || !pvc)
      throw new MoveIncomplete(
        `PV ${this.r.newPv} or claim ${namespace}/${name} vanished during the bind; run move again`,
      );
    if (!pv.spec.claimRef?.uid) {
      // pre-bind fully: the PV controller then only confirms the pair
      await this.cp('prebind:before');
      await this.d.kube.patchPv(this.r.newPv, { spec: { claimRef: { uid: pvc.metadata.uid, namespace, name } } });
    }
    const end = Date.now() + (this.d.bindTimeoutMs ?? 120_000);
    for (;;) {
      const cur = await this.d.kube.getPvc(namespace, name);
      if (cur?.status?.phase === 'Bound' && cur.spec.volumeName === this.r.newPv) break;
      if (Date.now() > end)
        throw new MoveIncomplete(
          `claim ${namespace}/${name} is not bound to PV ${this.r.newPv} yet (is kube-controller-manager running?); run move again`,
        );
      await sleep(250);
    }
    await this.save('bound');
  }

  private async finish(): Promise<void> {
    if (this.r.leftover) {
      await this.freeLeftover(this.r.leftover);
    }
    const old = await this.d.kube.getPv(this.r.oldPv);
    if (old) {
      await this.cp('delete-old-pv:before');
      await this.d.kube.deletePv(this.r.oldPv, old.metadata.uid ?? '');
      await this.awaitPvGone(old);
    }
    await this.cp('restore-policy:before');
    const moved: Record<string, string | null> = { [RECORD_KEY]: null, [MOVED_FROM_KEY]: this.r.oldPv };
    await this.d.kube.patchPv(this.r.newPv, {
      metadata: { annotations: moved },
      spec: { persistentVolumeReclaimPolicy: this.r.reclaimPolicy },
    });
    this.r = { ...this.r, step: 'done' };
    this.done.push('done');
  }

  /**
   * The source copy a migration could not free: only now, with the claim bound on the target, and
   * only as a leftover (the gate: no VM of the source host references it in a fresh read, no PV
   * but this move's old one names it there).
   */
  private async freeLeftover(volid: string): Promise<void> {
    const src = this.src;
    const pvHandles = (await this.d.kube.listPvs()).flatMap((pv) =>
      pv.metadata.name !== this.r.oldPv && pv.spec.csi
        ? [{ pv: pv.metadata.name, handle: pv.spec.csi.volumeHandle }]
        : [],
    );
    try {
      await this.mover.freeSourceCopy(volid, src.node, { region: this.d.region, pvHandles, zone: src.node }, () =>
        this.cp('free-leftover:before'),
      );
    } catch (e) {
      if (!isOwnershipRefusal(e)) throw e;
      this.d.log(`leftover ${volid} on ${src.node} is not freed: ${e.message}`);
    }
  }

  /** A Released PV's pv-protection finalizer goes quickly; without the controller it is taken off here. */
  private async awaitPvGone(old: PersistentVolume): Promise<void> {
    for (let i = 0; ; i++) {
      const cur = await this.d.kube.getPv(this.r.oldPv);
      if (!cur || cur.metadata.uid !== old.metadata.uid) return;
      if (i === 20) await this.d.kube.patchPv(this.r.oldPv, { metadata: { finalizers: null } });
      if (i > 120) throw new MoveIncomplete(`PV ${this.r.oldPv} is not going away; run move again`);
      await sleep(250);
    }
  }

  /** Back to where the move started, allowed only while the disk is still on the source. */
  async rollback(reason: string): Promise<never> {
    const st = await this.mover.state();
    if (st && st.node === this.r.toZone) {
      throw new MoveIncomplete(`cannot roll back: the disk is already on ${this.r.toZone}; run move again to finish`);
    }
    if (stepIndex(this.r.step) > stepIndex('migrating'))
      throw new MoveIncomplete(`cannot roll back at step ${this.r.step}; run move again to finish`);
    this.d.log(`rolling back: ${reason}`);
    await this.cp('rollback:before');
    if (st) await this.mover.release(this.src.volid);
    await this.cp('rollback:released');
    await this.d.kube.patchPv(this.r.oldPv, {
      spec: { persistentVolumeReclaimPolicy: this.r.reclaimPolicy },
      ...recordPatch(null),
    });
    this.done.push('rolled-back');
    throw new MoveRolledBack(reason);
  }
}
