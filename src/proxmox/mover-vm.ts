// The mover VM: the VM `pve-nfs-csi move` borrows to carry an unattached LVM-thin disk to another
// host of the same cluster through the API, without root@pam. Not to be confused with the
// expansion helpers (controller/safety/expansion-helpers.ts): the cluster's node VMs an offline
// expansion borrows; the mover VM is one VM of our own, made and destroyed by each move.
//
// What Proxmox VE offers (read from qemu-server and pve-storage): the storage API's volume copy
// (`POST …/storage/{storage}/content/{volume}`) is marked "experimental - do not use" and has no
// permission check, so only root@pam may call it (upstream's pvecsictl therefore needs root);
// `move_disk` stays on one node; `remote_migrate` is for another cluster. What is left is an
// offline migration of a stopped VM whose config references the disk: QemuMigrate copies every
// referenced local volume (pvesm export | pvesm import, raw+size for lvmthin) under the same
// name, moves the config, and frees the source copy. It refuses a volume the VM does not own
// ("owned by other VM"), and a disk `vm-9999-pvc-…` is owned by VMID 9999 (the controller VMID,
// which normally does not exist as a VM). So the helper is a stopped, disk-less VM with the
// controller VMID that holds the disk as `unused0` for the length of one move.
//
// Letting go of the disk afterwards is the delicate part: deleting `unused0` (or destroying the
// VM while it references the disk) frees a volume the VM owns. Overwriting `unused0` with a
// name that is no volume drops the reference without freeing anything (unusedN is a plain
// config key; only deletes deallocate), and destroying the VM then frees only that name, which
// does not exist (lvmthin's free of a missing LV is no error). destroy-unreferenced-disks is
// never passed: it would free every vm-9999-* disk on the host.
//
// Every change goes through the ownership gate (controller/safety/ownership-day2.ts: the mover
// decisions) and its port (mover-port.ts): this class holds the API read-only by type, reads the
// helper and the disk's host fresh before each change, and sends only what a permit names.
import { FailedPrecondition, isCsiError } from '../errors.js';
import type { ProxmoxApi, ProxmoxReadApi, ProxmoxVmLifecycle, ProxmoxVmLifecycleRead } from './api/api.js';
import { sleep, upidNode, waitTask } from './api/tasks.js';
import { readFreshOf } from './controller/safety/fresh-read.js';
import { MoverPort } from './controller/safety/mover-port.js';
import {
  MOVER_VM_NAME,
  type HelperVm,
  decideMovable,
  decideMoverCreate,
  decideMoverDestroy,
  decideMoverHold,
  decideMoverMigrate,
  decideMoverRelease,
  decideFreeLeftover,
  isReleasedPlaceholder,
  type Unclaimed,
} from './controller/safety/ownership-day2.js';
import { type DiskFacts, must } from './controller/safety/ownership.js';
import { parseVolid } from './volume-id.js';

export { MOVER_VM_NAME } from './controller/safety/ownership-day2.js';
const moverVmDescription = (volid: string) =>
  `pve-nfs-csi move: carries ${volid} to another host; removed when the move ends`;

/** What a move is handed: the full API, split here into reads and the gated port. */
export type MoverApi = ProxmoxApi & ProxmoxVmLifecycle;
/** What a move reads (the rest of its API is reached only through the port). */
export type MoverReadApi = ProxmoxReadApi & ProxmoxVmLifecycleRead;

export interface MoverVmState extends HelperVm {
  /** Volume ids the config references (current, pending, unusedN). */
  volids: string[];
}

export interface MoverVmOptions {
  api: MoverApi;
  cluster: string;
  /** The config's controller VMID: the helper's VMID (it must own the disk). */
  vmid: number;
  signal?: AbortSignal;
  /** How long one migration may take (a large disk copies for a while). Default 6 h. */
  migrateTimeoutMs?: number;
  log?: (line: string) => void;
}

const VOLID_RE = /^[a-z][a-z0-9._-]*[a-z0-9]:[^,]+/i;

/** The volume id of a config value (drive string or unusedN), if it names a storage volume. */
export function volidOfValue(key: string, value: string): string | undefined {
  if (!/^(scsi|virtio|sata|ide|efidisk|tpmstate|unused)\d+$/.test(key)) return undefined;
  const file = value.split(',')[0] ?? '';
  return VOLID_RE.test(file) && parseVolid(file) ? file : undefined;
}

export class MoverVm {
  private readonly api: MoverReadApi;
  private readonly port: MoverPort;
  private readonly o: Omit<MoverVmOptions, 'api'>;

  constructor({ api, ...o }: MoverVmOptions) {
    this.api = api;
    this.port = new MoverPort(api);
    this.o = o;
  }

  private get w() {
    return { cluster: this.o.cluster, signal: this.o.signal };
  }

  private disk(volid: string): DiskFacts {
    const ref = parseVolid(volid);
    if (!ref) throw new FailedPrecondition(`move: ${volid} is not a volume id (storage:disk)`);
    return { storage: ref.storage, disk: ref.disk, controllerVmId: this.o.vmid };
  }

  /** The disk's host as the gate needs it: every VM's config, pending and snapshot sections, read now. */
  private fresh(node: string) {
    return readFreshOf(this.api, [node], this.o.signal);
  }

  /**
   * Where the helper VMID is and what it holds; undefined when no VM has that VMID. The node comes
   * from /cluster/resources, which can lag behind a migration by a few seconds (pmxcfs, and the
   * API's short cache); the config read on that node is authoritative, so a listing that is
   * stale shows up as a config that does not exist there, and is read again.
   */
  async state(): Promise<MoverVmState | undefined> {
    const { vmid, signal } = this.o;
    const api = this.api;
    for (let attempt = 1; ; attempt++) {
      const row = (await api.vmResources({ signal })).find((r) => r.vmid === vmid);
      if (!row) return undefined;
      try {
        return this.stateOf(row, await api.vmPending(row.node, vmid, { signal }));
      } catch (e) {
        if (!isCsiError(e, 'NotFound') || attempt >= 20) throw e;
        await sleep(500, signal);
      }
    }
  }

  private stateOf(
    row: { node: string; name: string; status?: string | undefined },
    entries: Awaited<ReturnType<MoverReadApi['vmPending']>>,
  ): MoverVmState {
    const held: Array<{ key: string; volid: string }> = [];
    let lock: string | undefined;
    let name = row.name;
    for (const e of entries) {
      if (e.key === 'lock') lock = e.value;
      if (e.key === 'name' && e.value) name = e.value;
      for (const v of new Set([e.value, e.pending])) {
        const volid = v === undefined ? undefined : volidOfValue(e.key, v);
        if (volid) held.push({ key: e.key, volid });
      }
    }
    const volids = [...new Set(held.map((h) => h.volid))];
    return { vmid: this.o.vmid, node: row.node, name, status: row.status, lock, held, volids };
  }

  /** Refuses a VM with our VMID that is not our helper: it could be a real VM someone made. */
  assertOurs(st: MoverVmState): void {
    if (st.name !== MOVER_VM_NAME) {
      throw new FailedPrecondition(
        `VMID ${this.o.vmid} (the controller VMID that owns the driver's disks) is a VM named "${st.name}" on ${st.node}; ` +
          `move uses that VMID for its helper VM "${MOVER_VM_NAME}" and will not touch another VM`,
      );
    }
  }

  private async wait(upid: string, node: string, what: string, timeoutMs = 120_000): Promise<void> {
    await waitTask(this.api, node, upid, { ...this.w, what, timeoutMs });
  }

  /**
   * The gate's check for a new move, before anything changes: a disk of the driver that no VM of
   * `node` references in a fresh read (snapshot sections included). Throws the gate's refusal.
   */
  async checkMovable(node: string, volid: string): Promise<void> {
    must(decideMovable(this.disk(volid), await this.fresh(node)));
  }

  /** Makes the helper exist on `node`, stopped, holding exactly `volid` as unused0. Idempotent. */
  async hold(node: string, volid: string, attempt = 1): Promise<void> {
    const { vmid, signal } = this.o;
    let st = await this.state();
    if (st) this.assertOurs(st);
    if (st && st.node !== node && st.volids.length === 0) {
      // an empty helper left elsewhere (a crash after its release): remove it, make it here
      await this.destroy(st);
      st = undefined;
    }
    if (!st) {
      this.o.log?.(`create helper VM ${vmid} on ${node} holding ${volid}`);
      const permit = must(
        decideMoverCreate(this.disk(volid), node, await this.fresh(node), undefined, moverVmDescription(volid)),
      );
      let upid: string;
      try {
        upid = await this.port.create(permit, { signal });
      } catch (e) {
        // the VM list lagged behind a create that did happen (ours, retried, or a run that died):
        // read again and go on from what is there
        if (!isCsiError(e, 'AlreadyExists') || attempt >= 3) throw e;
        await sleep(1000, signal);
        return this.hold(node, volid, attempt + 1);
      }
      await this.wait(upid, node, `create helper VM ${vmid} on ${node}`);
      return;
    }
    if (st.node !== node || st.volids.some((v) => v !== volid)) {
      throw new FailedPrecondition(
        `helper VM ${vmid} is on ${st.node} holding ${st.volids.join(', ') || 'nothing'}${st.lock ? ` (lock: ${st.lock})` : ''}: ` +
          `another move is in progress; finish it first (run move for its claim again)`,
      );
    }
    if (st.volids.length === 0) {
      const permit = must(decideMoverHold(this.disk(volid), node, await this.fresh(node), st));
      const upid = await this.port.hold(permit, { signal });
      if (upid) await this.wait(upid, node, `let helper VM ${vmid} hold ${volid}`);
    }
  }

  /**
   * Starts the offline migration of the helper holding `volid` (default: the one volume it
   * holds); returns the task id. The gate reads the host fresh: no other VM may name the disk.
   */
  async startMigration(node: string, target: string, volid?: string): Promise<string> {
    const st = await this.state();
    if (!st) throw new FailedPrecondition(`helper VM ${this.o.vmid} does not exist: nothing to migrate`);
    const disk = this.disk(volid ?? st.volids[0] ?? '');
    const permit = must(decideMoverMigrate(disk, target, await this.fresh(st.node), st));
    this.o.log?.(`migrate helper VM ${this.o.vmid} from ${node} to ${target}`);
    return this.port.migrate(permit, { signal: this.o.signal });
  }

  /** Waits for a migration task; resolves to its log, rejects with the task's error. */
  async finishMigration(upid: string, node: string): Promise<string[]> {
    const n = upidNode(upid) ?? node;
    let failure: unknown;
    try {
      await this.wait(upid, n, `migrate helper VM ${this.o.vmid}`, this.o.migrateTimeoutMs ?? 6 * 3600_000);
    } catch (e) {
      failure = e;
    }
    const log = await this.api.taskLog(n, upid, { signal: this.o.signal }).catch(() => []);
    if (failure) {
      const detail = log
        .filter((l) => /ERROR:|can't migrate|failed/.test(l))
        .map((l) => l.replace(/^\S+ \S+ /, ''))
        .join('; ');
      const err = failure instanceof Error ? failure : new Error(JSON.stringify(failure));
      if (detail) err.message += ` (${detail})`;
      throw err;
    }
    return log;
  }

  /**
   * Drops the helper's reference to `volid` without freeing the volume, then destroys the helper.
   * Idempotent: nothing to do when the helper is gone.
   */
  async release(volid: string): Promise<void> {
    const { vmid, signal } = this.o;
    const st = await this.state();
    if (!st) return;
    this.assertOurs(st);
    if (st.lock)
      throw new FailedPrecondition(
        `helper VM ${vmid} on ${st.node} is locked (${st.lock}); wait for its task to end, then run move again`,
      );
    if (st.volids.includes(volid)) {
      this.o.log?.(`helper VM ${vmid} on ${st.node} lets go of ${volid}`);
      const upid = await this.port.release(must(decideMoverRelease(st, volid, vmid)), { signal });
      if (upid) await this.wait(upid, st.node, `let helper VM ${vmid} release ${volid}`);
    }
    const after = await this.state();
    if (!after) return;
    const real = after.volids.filter((v) => !isReleasedPlaceholder(v));
    if (real.length > 0) {
      throw new FailedPrecondition(
        `helper VM ${vmid} on ${after.node} still references ${real.join(', ')}; not destroying it`,
      );
    }
    await this.destroy(after);
  }

  /**
   * Frees a copy of the disk the migration left on `node`, once the claim is bound on the target:
   * only a leftover (ownership-day2.ts: no VM of that host references it in a fresh read, no PV
   * of `proof` names it there). Resolves false when it is gone already; a refusal throws.
   */
  async freeSourceCopy(
    volid: string,
    node: string,
    proof: Unclaimed,
    beforeFree?: () => Promise<void>,
  ): Promise<boolean> {
    const d = this.disk(volid);
    const { signal } = this.o;
    const there = (await this.api.listContent(node, d.storage, undefined, { signal })).some((c) => c.volid === volid);
    if (!there) return false;
    const permit = must(decideFreeLeftover(d, node, await this.fresh(node), proof));
    await beforeFree?.();
    this.o.log?.(`free the source copy ${volid} on ${node}`);
    const upid = await this.port.disks.freeLeftover(permit, { signal });
    if (upid) await this.wait(upid, node, `free ${volid}`);
    return true;
  }

  private async destroy(st: MoverVmState): Promise<void> {
    const permit = must(decideMoverDestroy(st, await this.fresh(st.node), this.o.vmid));
    this.o.log?.(`destroy helper VM ${this.o.vmid} on ${st.node}`);
    const upid = await this.port.destroy(permit, { signal: this.o.signal });
    await this.wait(upid, st.node, `destroy helper VM ${this.o.vmid}`);
  }
}
