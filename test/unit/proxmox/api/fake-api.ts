// An in-memory Proxmox for unit tests of the driver logic: VMs with config, pending section and
// a config lock, LVM-thin storages, tasks, latency, and faults injected per call. It raises the
// same typed errors the HTTP adapter produces, and records every call and any slot conflict
// (a scsiN set over another disk), which is the race the attach queue must prevent.
import { createHash } from 'node:crypto';
import {
  Busy,
  InvalidArgument,
  NotFound,
  ResourceExhausted,
  Unavailable,
  AlreadyExists,
} from '../../../../src/errors.js';
import type {
  ActiveTask,
  AllocRequest,
  CallOptions,
  ConfigChange,
  FreeOptions,
  ConfigEntry,
  NodeResource,
  ProxmoxApi,
  ResizeOptions,
  StorageContentItem,
  StorageResource,
  StorageStatus,
  TaskListItem,
  TaskQuery,
  TaskStatus,
  UnlinkOptions,
  VmConfig,
  VmResource,
} from '../../../../src/proxmox/api/api.js';
import { taskError } from '../../../../src/proxmox/api/errors.js';

export interface FakeVm {
  vmid: number;
  name: string;
  node: string;
  running: boolean;
  template?: boolean | undefined;
  config: Map<string, string>;
  pending: Map<string, string>;
  pendingDelete: Set<string>;
  /** Snapshot sections (`[name]` of the config file): name → keys (none when absent). */
  snapshots?: Map<string, Map<string, string>> | undefined;
}

export interface FakeStorage {
  size: number;
  shared: boolean;
  content: string;
  /** disk name → bytes */
  volumes: Map<string, number>;
  /**
   * LVM-thin usage as Proxmox reports it: `used` is what was written (disk name → bytes, see
   * write()), not what was allocated. Unset: `used` is the sum of the volumes' sizes.
   */
  written?: Map<string, number> | undefined;
}

type Method = keyof ProxmoxApi;

export class FakeProxmox implements ProxmoxApi {
  latencyMs = 0;
  lockWaitMs = 50;
  readonly calls: Array<{ method: Method; args: unknown[] }> = [];
  readonly nodes = new Map<string, Map<string, FakeStorage>>();
  readonly vms = new Map<number, FakeVm>();
  slotConflicts = 0;
  maxConcurrentWriters = 0;
  private writers = new Map<number, number>();
  private locks = new Map<number, Promise<void>>();
  private tasks = new Map<
    string,
    { node: string; exit: string; doneAt: number; type: string; id: string; user: string; running?: boolean }
  >();
  /** The identity this fake answers as (a driver token); other instances' tasks carry it too. */
  readonly tokenUser = 'kubernetes-csi@pve!csi';
  private taskSeq = 0;

  /** Faults, consumed as they fire. */
  faults = {
    /** Next N config writes (update/unlink/resize) time out on the VM lock. */
    lockTimeouts: 0,
    /** Exit statuses for the next config/free/resize tasks; '' = OK. */
    taskExits: [] as string[],
    /** A failing task still made its change (PVE fails after partial work). */
    taskFailApplies: false,
    /** Calls of these methods take effect, then their answer is lost (N each). */
    dropAfter: new Map<Method, number>(),
    /** Calls of these methods fail before doing anything (N each). */
    dropBefore: new Map<Method, number>(),
    /** VMIDs whose detach hot-unplug keeps failing: the delete stays pending. */
    stuckDetach: new Set<number>(),
    /** VMIDs whose attach hot-plug keeps failing: the value stays pending. */
    stuckAttach: new Set<number>(),
    /** Allocation beyond the storage size fails. */
    strictSpace: false,
  };

  addNode(name: string, storages: Record<string, Partial<FakeStorage>> = { 'local-lvm': {} }): void {
    const m = new Map<string, FakeStorage>();
    for (const [id, s] of Object.entries(storages)) {
      m.set(id, {
        size: s.size ?? 200 * 2 ** 30,
        shared: s.shared ?? false,
        content: s.content ?? 'images,rootdir',
        volumes: s.volumes ?? new Map<string, number>(),
        written: s.written,
      });
    }
    this.nodes.set(name, m);
  }

  addVm(vm: {
    vmid: number;
    name: string;
    node: string;
    running?: boolean;
    template?: boolean;
    uuid?: string;
  }): FakeVm {
    const config = new Map([
      ['name', vm.name],
      ['scsi0', `local-lvm:vm-${vm.vmid}-disk-0,iothread=1,size=32G`],
      ['scsihw', 'virtio-scsi-single'],
    ]);
    if (vm.uuid) config.set('smbios1', `uuid=${vm.uuid}`);
    const full: FakeVm = {
      vmid: vm.vmid,
      name: vm.name,
      node: vm.node,
      running: vm.running ?? true,
      template: vm.template,
      config,
      pending: new Map(),
      pendingDelete: new Set(),
      snapshots: new Map(),
    };
    this.vms.set(full.vmid, full);
    this.nodes
      .get(full.node)
      ?.get('local-lvm')
      ?.volumes.set(`vm-${full.vmid}-disk-0`, 32 * 2 ** 30);
    return full;
  }

  count(method?: Method): number {
    return method ? this.calls.filter((c) => c.method === method).length : this.calls.length;
  }

  resetCalls(): void {
    this.calls.length = 0;
  }

  private async enter(method: Method, args: unknown[], o?: CallOptions): Promise<void> {
    this.calls.push({ method, args });
    if (this.latencyMs) await new Promise((r) => setTimeout(r, this.latencyMs));
    if (o?.signal?.aborted) throw new Unavailable(`${method}: cancelled`);
    const before = this.faults.dropBefore.get(method) ?? 0;
    if (before > 0) {
      this.faults.dropBefore.set(method, before - 1);
      throw new Unavailable(`Proxmox test: ${method}: cannot reach the API: other side closed`);
    }
  }

  private leave(method: Method): void {
    const after = this.faults.dropAfter.get(method) ?? 0;
    if (after > 0) {
      this.faults.dropAfter.set(method, after - 1);
      throw new Unavailable(`Proxmox test: ${method}: cannot reach the API: socket hang up`);
    }
  }

  /** A VM of the fake cluster, for a test to look at or change (fails the test when there is none). */
  vmOf(vmid: number): FakeVm {
    const vm = this.vms.get(vmid);
    if (!vm) throw new Error(`fake cluster: no VM ${vmid}`);
    return vm;
  }

  /** A storage of a node of the fake cluster (fails the test when there is none). */
  storageOf(node: string, storage: string): FakeStorage {
    const s = this.nodes.get(node)?.get(storage);
    if (!s) throw new Error(`fake cluster: no storage ${storage} on ${node}`);
    return s;
  }

  private vm(node: string, vmid: number): FakeVm {
    const vm = this.vms.get(vmid);
    if (!vm || vm.node !== node)
      throw new NotFound(`Proxmox test: Configuration file 'nodes/${node}/qemu-server/${vmid}.conf' does not exist`);
    return vm;
  }

  private storage(node: string, id: string): FakeStorage {
    const s = this.nodes.get(node)?.get(id);
    if (!s) throw new NotFound(`Proxmox test: storage '${id}' does not exist`);
    return s;
  }

  private digestOf(vm: FakeVm): string {
    return createHash('sha1')
      .update(JSON.stringify([[...vm.config], [...vm.pending], [...vm.pendingDelete]]))
      .digest('hex');
  }

  /** Proxmox's per-VM config lock: waits, then fails like `can't lock file … got timeout`. */
  private async withLock<T>(vm: FakeVm, fn: () => T): Promise<T> {
    if (this.faults.lockTimeouts > 0) {
      this.faults.lockTimeouts--;
      throw new Busy(`Proxmox test: can't lock file '/var/lock/qemu-server/lock-${vm.vmid}.conf' - got timeout`);
    }
    const deadline = Date.now() + this.lockWaitMs;
    while (this.locks.has(vm.vmid)) {
      if (Date.now() > deadline)
        throw new Busy(`Proxmox test: can't lock file '/var/lock/qemu-server/lock-${vm.vmid}.conf' - got timeout`);
      await Promise.race([this.locks.get(vm.vmid), new Promise((r) => setTimeout(r, 5))]);
    }
    let release!: () => void;
    this.locks.set(vm.vmid, new Promise<void>((r) => (release = r)));
    const n = (this.writers.get(vm.vmid) ?? 0) + 1;
    this.writers.set(vm.vmid, n);
    this.maxConcurrentWriters = Math.max(this.maxConcurrentWriters, n);
    try {
      if (this.latencyMs) await new Promise((r) => setTimeout(r, this.latencyMs));
      return fn();
    } finally {
      this.writers.set(vm.vmid, n - 1);
      this.locks.delete(vm.vmid);
      release();
    }
  }

  /** A task; a failing one (from faults.taskExits) made no change unless taskFailApplies. */
  private task(node: string, exit = 'OK', type = 'qmconfig', id = '1'): string {
    const upid = `UPID:${node}:0000${(++this.taskSeq).toString(16).padStart(4, '0')}:00000001:00000001:${type}:${id}:${this.tokenUser}:`;
    this.tasks.set(upid, { node, exit, doneAt: Date.now(), type, id, user: this.tokenUser });
    return upid;
  }

  /**
   * Another instance of the driver (same token) changes a VM's config in a qmconfig task: what
   * a previous run's change that waited for the lock looks like when it lands.
   */
  foreignChange(vmid: number, set: Record<string, string>): string {
    const vm = this.vms.get(vmid);
    if (!vm) throw new Error(`fake: no VM ${vmid}`);
    for (const [k, v] of Object.entries(set)) vm.config.set(k, v);
    return this.task(vm.node, 'OK', 'qmconfig', String(vmid));
  }

  /** With waitSeconds (background_delay / delay): null when the task ended OK, its error otherwise. */
  private waited(upid: string, waitSeconds: number | undefined, what: string): string | null {
    if (!waitSeconds) return upid;
    const t = this.tasks.get(upid);
    if (!t || t.exit === 'OK') return null;
    throw taskError(t.exit, { cluster: 'test', what });
  }

  private volumeExists(node: string, value: string): boolean {
    const [st, disk] = driveDisk(value);
    return this.nodes.get(node)?.get(st)?.volumes.has(disk) ?? false;
  }

  // ---- ProxmoxApi ----

  async version(o?: CallOptions) {
    await this.enter('version', [], o);
    return { version: '8.2.4', release: '8.2' };
  }

  async vmResources(o?: CallOptions): Promise<VmResource[]> {
    await this.enter('vmResources', [], o);
    return [...this.vms.values()].map((v) => ({
      type: 'qemu',
      vmid: v.vmid,
      name: v.name,
      node: v.node,
      status: v.running ? 'running' : 'stopped',
      template: !!v.template,
    }));
  }

  async storageResources(o?: CallOptions): Promise<StorageResource[]> {
    await this.enter('storageResources', [], o);
    const rows: StorageResource[] = [];
    for (const [node, sts] of this.nodes) {
      for (const [id, s] of sts) {
        const used = [...s.volumes.values()].reduce((a, b) => a + b, 0);
        rows.push({
          storage: id,
          node,
          content: s.content,
          plugintype: 'lvmthin',
          shared: s.shared,
          status: 'available',
          disk: used,
          maxdisk: s.size,
        });
      }
    }
    return rows;
  }

  async nodeResources(o?: CallOptions): Promise<NodeResource[]> {
    await this.enter('nodeResources', [], o);
    return [...this.nodes.keys()].map((node) => ({ node, status: 'online' }));
  }

  async storageStatus(node: string, storage: string, o?: CallOptions): Promise<StorageStatus> {
    await this.enter('storageStatus', [node, storage], o);
    const s = this.storage(node, storage);
    const used = s.written
      ? [...s.written].reduce((a, [disk, n]) => a + Math.min(n, s.volumes.get(disk) ?? 0), 0)
      : [...s.volumes.values()].reduce((a, b) => a + b, 0);
    return {
      total: s.size,
      used,
      avail: s.size - used,
      active: true,
      enabled: true,
      type: 'lvmthin',
      shared: s.shared,
      content: s.content,
    };
  }

  /** A guest writes `bytes` more into a volume of a thin storage (its `used` grows; capped at the size). */
  write(node: string, storage: string, disk: string, bytes: number): void {
    const s = this.storage(node, storage);
    if (!s.written) throw new Error(`fake: storage ${storage} on ${node} is not thin (no written map)`);
    s.written.set(disk, (s.written.get(disk) ?? 0) + bytes);
  }

  async listContent(
    node: string,
    storage: string,
    vmid: number | undefined,
    o?: CallOptions,
  ): Promise<StorageContentItem[]> {
    await this.enter('listContent', [node, storage, vmid], o);
    const s = this.storage(node, storage);
    return [...s.volumes]
      .map(([disk, size]) => ({
        volid: `${storage}:${disk}`,
        size,
        vmid: Number(/^vm-(\d+)-/.exec(disk)?.[1]),
        format: 'raw',
      }))
      .filter((i) => vmid === undefined || i.vmid === vmid);
  }

  async allocDisk(node: string, storage: string, req: AllocRequest, o?: CallOptions): Promise<string> {
    await this.enter('allocDisk', [node, storage, req], o);
    const s = this.storage(node, storage);
    if (s.volumes.has(req.filename))
      throw new AlreadyExists(`Proxmox test: volume '${storage}:${req.filename}' already exists`);
    const used = [...s.volumes.values()].reduce((a, b) => a + b, 0);
    if (this.faults.strictSpace && used + req.sizeBytes > s.size)
      throw new ResourceExhausted('Proxmox test: not enough free space in thin pool');
    s.volumes.set(req.filename, req.sizeBytes);
    this.leave('allocDisk');
    return `${storage}:${req.filename}`;
  }

  async freeDisk(node: string, storage: string, volid: string, o?: FreeOptions): Promise<string | null> {
    await this.enter('freeDisk', [node, storage, volid], o);
    const s = this.storage(node, storage);
    const disk = volid.slice(volid.indexOf(':') + 1);
    // pve-storage: freeing a volume that is not there succeeds (lvremove of a missing LV).
    s.volumes.delete(disk);
    const upid = this.task(node, 'OK', 'imgdel', `${/^vm-(\d+)-/.exec(disk)?.[1] ?? ''}@${storage}`);
    this.leave('freeDisk');
    return this.waited(upid, o?.waitSeconds, `free ${volid}`);
  }

  async vmConfig(node: string, vmid: number, o?: CallOptions): Promise<VmConfig> {
    await this.enter('vmConfig', [node, vmid], o);
    const vm = this.vm(node, vmid);
    const values = new Map(vm.config);
    for (const [k, v] of vm.pending) values.set(k, v);
    for (const k of vm.pendingDelete) values.delete(k);
    return { digest: this.digestOf(vm), values: Object.fromEntries(values) };
  }

  async vmPending(node: string, vmid: number, o?: CallOptions): Promise<ConfigEntry[]> {
    await this.enter('vmPending', [node, vmid], o);
    const vm = this.vm(node, vmid);
    const keys = new Set([...vm.config.keys(), ...vm.pending.keys(), ...vm.pendingDelete]);
    const entries: ConfigEntry[] = [...keys].map((key) => ({
      key,
      value: vm.config.get(key),
      pending: vm.pending.get(key),
      pendingDelete: vm.pendingDelete.has(key) || undefined,
    }));
    // qemu-server leaves a new disk pending with the task OK only when the VM does not hot-plug disks.
    // Likewise a delete (qemu-server raises `hotplug problem` when a disk hot-unplug fails).
    if ((this.faults.stuckAttach.has(vmid) || this.faults.stuckDetach.has(vmid)) && !keys.has('hotplug'))
      entries.push({ key: 'hotplug', value: 'network,usb' });
    return entries;
  }

  async vmSnapshots(node: string, vmid: number, o?: CallOptions): Promise<string[]> {
    await this.enter('vmSnapshots', [node, vmid], o);
    const names = [...(this.vm(node, vmid).snapshots?.keys() ?? [])];
    this.leave('vmSnapshots');
    return names;
  }

  async vmSnapshotConfig(
    node: string,
    vmid: number,
    snapshot: string,
    o?: CallOptions,
  ): Promise<Record<string, string>> {
    await this.enter('vmSnapshotConfig', [node, vmid, snapshot], o);
    const s = this.vm(node, vmid).snapshots?.get(snapshot);
    if (!s) throw new InvalidArgument(`Proxmox test: snapshot '${snapshot}' does not exist`);
    this.leave('vmSnapshotConfig');
    return Object.fromEntries(s);
  }

  async updateVmConfig(node: string, vmid: number, change: ConfigChange, o?: CallOptions): Promise<string | null> {
    await this.enter('updateVmConfig', [node, vmid, change], o);
    const vm = this.vm(node, vmid);
    const upid = await this.withLock(vm, () => {
      const exit = this.faults.taskExits.shift() || 'OK';
      if (exit !== 'OK' && !this.faults.taskFailApplies) return this.task(node, exit, 'qmconfig', String(vmid));
      if (change.digest && change.digest !== this.digestOf(vm)) {
        throw new Busy('Proxmox test: detected modified configuration - file changed by other user? Try again.');
      }
      for (const [k, v] of Object.entries(change.set ?? {})) {
        if (/^scsi\d+$/.test(k) && !this.volumeExists(vm.node, v))
          throw new NotFound(`Proxmox test: volume '${v.split(',')[0]}' does not exist`);
        const held = vm.config.get(k) ?? vm.pending.get(k);
        if (held && held.split(',')[0] !== v.split(',')[0]) this.slotConflicts++;
      }
      for (const k of change.delete ?? []) {
        vm.pending.delete(k);
        if (vm.running && /^scsi\d+$/.test(k) && this.faults.stuckDetach.has(vmid)) vm.pendingDelete.add(k);
        else vm.config.delete(k);
      }
      for (const [k, v] of Object.entries(change.set ?? {})) {
        if (vm.running && this.faults.stuckAttach.has(vmid)) vm.pending.set(k, v);
        else {
          vm.config.set(k, v);
          vm.pending.delete(k);
        }
      }
      return this.task(node, exit, 'qmconfig', String(vmid));
    });
    this.leave('updateVmConfig');
    return this.waited(upid, change.waitSeconds, `change config of VM ${vmid}`);
  }

  async unlinkDisks(node: string, vmid: number, keys: string[], o?: UnlinkOptions): Promise<void> {
    await this.enter('unlinkDisks', [node, vmid, keys, o?.digest], o);
    const vm = this.vm(node, vmid);
    await this.withLock(vm, () => {
      if (o?.digest && o.digest !== this.digestOf(vm))
        throw new Busy('Proxmox test: checksum mismatch (file change by other user?)');
      for (const k of keys) {
        vm.pending.delete(k);
        if (!vm.config.has(k)) {
          vm.pendingDelete.delete(k);
          continue;
        }
        if (vm.running && /^scsi\d+$/.test(k) && this.faults.stuckDetach.has(vmid)) {
          vm.pendingDelete.add(k);
        } else {
          vm.config.delete(k);
          vm.pendingDelete.delete(k);
        }
      }
    });
    this.leave('unlinkDisks');
  }

  async resizeDisk(node: string, vmid: number, disk: string, size: string, o?: ResizeOptions): Promise<string | null> {
    await this.enter('resizeDisk', [node, vmid, disk, size], o);
    const vm = this.vm(node, vmid);
    const upid = await this.withLock(vm, () => {
      // qemu-server checks the digest inside the resize worker: the task fails.
      if (o?.digest && o.digest !== this.digestOf(vm))
        return this.task(node, 'checksum mismatch (file change by other user?)', 'resize', String(vmid));
      const value = vm.config.get(disk);
      if (!value) throw new NotFound(`Proxmox test: disk '${disk}' does not exist`);
      const [st, name] = driveDisk(value);
      const m = /^(\d+)M$/.exec(size);
      if (!m) throw new Error(`fake: unexpected size ${size}`);
      this.storage(vm.node, st).volumes.set(name, Number(m[1]) * 2 ** 20);
      return this.task(node);
    });
    this.leave('resizeDisk');
    return upid;
  }

  async taskStatus(node: string, upid: string, o?: CallOptions): Promise<TaskStatus> {
    await this.enter('taskStatus', [node, upid], o);
    const t = this.tasks.get(upid);
    if (!t) throw new NotFound(`Proxmox test: no such task '${upid}'`);
    return { status: 'stopped', exitstatus: t.exit };
  }

  /** Every task here has ended before its call answers: none is ever running. */
  async activeTasks(node: string, _filter: { type?: string; vmid?: number }, o?: CallOptions): Promise<ActiveTask[]> {
    await this.enter('activeTasks', [node], o);
    this.leave('activeTasks');
    return [];
  }

  async nodeTasks(node: string, q: TaskQuery, o?: CallOptions): Promise<TaskListItem[]> {
    await this.enter('nodeTasks', [node, q], o);
    const out: TaskListItem[] = [];
    for (const [upid, t] of [...this.tasks].reverse()) {
      if (t.node !== node || (q.typefilter && t.type !== q.typefilter) || (q.vmid && t.id !== String(q.vmid))) continue;
      const starttime = Math.floor(t.doneAt / 1000);
      if (q.since !== undefined && starttime < q.since) continue;
      const [user, tokenid] = t.user.split('!') as [string, string | undefined];
      out.push({ upid, node, type: t.type, id: t.id, user, tokenid, starttime, endtime: starttime, status: t.exit });
    }
    return out.slice(0, q.limit ?? 50);
  }
}

/** Three hosts with local-lvm and two VMs each, like the seed cluster. */
/** The storage and disk of a drive value (`local-lvm:vm-9999-pvc-1,backup=0`). */
function driveDisk(value: string): [storage: string, disk: string] {
  const m = /^([^:,]+):([^,]+)/.exec(value);
  if (!m) throw new Error(`fake: not a drive value: ${value}`);
  return [m[1] ?? '', m[2] ?? ''];
}

export function seedCluster(): FakeProxmox {
  const f = new FakeProxmox();
  let vmid = 101;
  for (const host of ['hyper1', 'hyper2', 'hyper3']) {
    f.addNode(host);
    const n = host.slice(-1);
    for (const role of ['cp', 'worker']) {
      f.addVm({ vmid, name: `talos-${role}-${n}`, node: host, uuid: `00000000-0000-4000-8000-000000000${vmid}` });
      vmid++;
    }
  }
  return f;
}
