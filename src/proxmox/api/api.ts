// The ProxmoxApi port: the few Proxmox VE calls the driver makes, in Proxmox's own terms.
// The HTTP adapter (http-api.ts) implements it over the proxmox-api package; unit tests use a
// fake. Every method throws the project's typed errors (see errors.ts), never raw HTTP errors.
// Optional fields are `?: T | undefined`: the adapter copies them from Proxmox's JSON, where any
// of them can be missing, so "absent" and "undefined" mean the same here.
import type { DiskFormat } from '../storage/kind.js';

/** One row of GET /cluster/resources (only the fields the driver reads). */
export interface VmResource {
  type: 'qemu' | 'lxc';
  vmid: number;
  name: string;
  node: string;
  status?: string | undefined;
  template?: boolean | undefined;
}

export interface StorageResource {
  /** Storage id, e.g. local-lvm. */
  storage: string;
  node: string;
  /** Comma-separated content types, e.g. "images,rootdir". */
  content: string;
  plugintype?: string | undefined;
  shared: boolean;
  /** "available" when the storage is active on that node. */
  status?: string | undefined;
  disk?: number | undefined;
  maxdisk?: number | undefined;
}

export interface NodeResource {
  node: string;
  status?: string | undefined;
}

export interface StorageStatus {
  total: number;
  used: number;
  avail: number;
  active: boolean;
  enabled: boolean;
  type?: string | undefined;
  shared: boolean;
  content: string;
}

/** One row of GET /nodes/{node}/storage/{storage}/content. */
export interface StorageContentItem {
  /** Full volume id, e.g. local-lvm:vm-9999-pvc-x. */
  volid: string;
  size: number;
  vmid?: number | undefined;
  format?: string | undefined;
  content?: string | undefined;
  /** Creation time, seconds since the epoch (LVM-thin reports lv_time; absent on some storages). */
  ctime?: number | undefined;
}

/**
 * One key of a VM configuration as GET …/pending reports it: the current value, the pending
 * value, and whether a delete is pending. Keys without pending changes only carry `value`.
 */
export interface ConfigEntry {
  key: string;
  value?: string | undefined;
  pending?: string | undefined;
  pendingDelete?: boolean | undefined;
}

export interface VmConfig {
  /** SHA1 of the config file; pass it back with changes to refuse concurrent edits. */
  digest: string;
  /** Keys with their values, pending values applied (Proxmox's default view). */
  values: Record<string, string>;
}

export interface TaskStatus {
  status: 'running' | 'stopped';
  /** "OK" on success, else the error text (only when stopped). */
  exitstatus?: string | undefined;
}

/** One row of GET /nodes/{node}/tasks?source=active: a task running on that node. */
export interface ActiveTask {
  upid: string;
  node: string;
  /** e.g. `qmconfig` for an asynchronous `POST …/config`. */
  type: string;
  /** The VMID for VM tasks. */
  id: string;
  /** Who started it: `user@realm!token` for an API token, else `user@realm`. */
  user: string;
  /** Epoch seconds on the Proxmox host's clock. */
  starttime: number;
}

export interface ConfigChange {
  /** Keys to set, e.g. { scsi3: 'local-lvm:vm-9999-pvc-x,wwn=0x…' }. */
  set?: Record<string, string> | undefined;
  /** Keys to delete. */
  delete?: string[] | undefined;
  /** Refuse the change when the config changed since it was read. */
  digest?: string | undefined;
  /**
   * POST only (`background_delay`): Proxmox waits up to this many seconds for the task and
   * answers null when it ended OK (an error when it failed), else the UPID as without it.
   * Saves the task poll; the change is still a `qmconfig` task other instances can see.
   */
  waitSeconds?: number | undefined;
}

/** One row of GET /nodes/{node}/tasks (PVE::API2::Tasks node_tasks). */
export interface TaskListItem {
  upid: string;
  node: string;
  type: string;
  /** The task's object, for qmconfig the VMID. */
  id: string;
  /** user@realm; a token's tasks also carry `tokenid`. */
  user: string;
  tokenid?: string | undefined;
  starttime: number;
  endtime?: number | undefined;
  /** 'RUNNING' for an active task, else its exit status ('OK', 'WARNINGS: n', the error). */
  status?: string | undefined;
}

export interface TaskQuery {
  typefilter?: string | undefined;
  vmid?: number | undefined;
  /** UNIX seconds: only tasks started since then. */
  since?: number | undefined;
  source?: 'archive' | 'active' | 'all';
  limit?: number | undefined;
}

export interface AllocRequest {
  vmid: number;
  filename: string;
  sizeBytes: number;
  format?: DiskFormat | undefined;
}

/** Optional per-call cancellation. */
export interface CallOptions {
  signal?: AbortSignal | undefined;
}

export interface UnlinkOptions extends CallOptions {
  /**
   * Refuse (Busy: `checksum mismatch`) unless the config still has this digest, so a slot
   * reused since the read is never detached. Sent as the synchronous PUT …/config with `delete`,
   * the same update (qemu-server's unlink is update_vm with delete = idlist) in the form that
   * takes a digest.
   */
  digest?: string | undefined;
}

export interface ResizeOptions extends CallOptions {
  /**
   * Refuse unless the config still has this digest, so a slot another disk took since the read
   * is never resized. qemu-server checks it inside the resize worker, after taking the VM lock:
   * the refusal is the task's exit status `checksum mismatch (file change by other user?)`.
   */
  digest?: string | undefined;
}

export interface FreeOptions extends CallOptions {
  /** `delay`: Proxmox waits up to this many seconds for the free task (null when it ended OK). */
  waitSeconds?: number | undefined;
}

/**
 * The reads: what every part of the driver may call. Outside the API adapter, code holds the
 * Proxmox API as this type; the mutating half (ProxmoxWriteApi) is reached only through the
 * ownership port, with a permit of the ownership gate for each call (docs/ownership.md).
 */
export interface ProxmoxReadApi {
  version(o?: CallOptions): Promise<{ version: string; release?: string | undefined }>;
  vmResources(o?: CallOptions): Promise<VmResource[]>;
  storageResources(o?: CallOptions): Promise<StorageResource[]>;
  nodeResources(o?: CallOptions): Promise<NodeResource[]>;

  storageStatus(node: string, storage: string, o?: CallOptions): Promise<StorageStatus>;
  /** Image volumes on one storage of one node; `vmid` narrows to the disks that VMID owns. */
  listContent(node: string, storage: string, vmid: number | undefined, o?: CallOptions): Promise<StorageContentItem[]>;

  vmConfig(node: string, vmid: number, o?: CallOptions): Promise<VmConfig>;
  /** Every key with its current and pending value. */
  vmPending(node: string, vmid: number, o?: CallOptions): Promise<ConfigEntry[]>;
  /** GET …/snapshot: the names of the VM's snapshots (`current`, the live config, left out). */
  vmSnapshots(node: string, vmid: number, o?: CallOptions): Promise<string[]>;
  /** GET …/config?snapshot=NAME: the keys of one snapshot section (`[NAME]` of the config file). */
  vmSnapshotConfig(node: string, vmid: number, snapshot: string, o?: CallOptions): Promise<Record<string, string>>;

  taskStatus(node: string, upid: string, o?: CallOptions): Promise<TaskStatus>;
  /** Running tasks on a node that this identity may see (its own; every one with Sys.Audit). */
  activeTasks(node: string, filter: { type?: string; vmid?: number }, o?: CallOptions): Promise<ActiveTask[]>;
  /**
   * GET /nodes/{node}/tasks. Without Sys.Audit (the driver's role has none) Proxmox lists only
   * the caller's own tasks: a token sees the tasks of that token, i.e. of every instance of
   * this driver, past or concurrent.
   */
  nodeTasks(node: string, q: TaskQuery, o?: CallOptions): Promise<TaskListItem[]>;
}

/** The calls that free, allocate, resize or change: only the ownership port sends them. */
export interface ProxmoxWriteApi {
  /** Allocates a disk; returns its volid. */
  allocDisk(node: string, storage: string, req: AllocRequest, o?: CallOptions): Promise<string>;
  /** Frees a disk; returns the task UPID when Proxmox ran it as a task. */
  freeDisk(node: string, storage: string, volid: string, o?: FreeOptions): Promise<string | null>;
  /** POST …/config: asynchronous on Proxmox; returns the task UPID (null when applied inline). */
  updateVmConfig(node: string, vmid: number, change: ConfigChange, o?: CallOptions): Promise<string | null>;
  /**
   * PUT …/unlink without force: detaches the drives; a disk owned by another VMID stays on the
   * storage. Synchronous: on a running VM whose `hotplug` has `disk`, qemu-server answers only
   * after the device left QEMU (qemu_devicedelverify) and the key left the config, else 400
   * `hotplug problem - …` with the key left pending.
   */
  unlinkDisks(node: string, vmid: number, keys: string[], o?: UnlinkOptions): Promise<void>;
  /**
   * PUT …/resize; `size` in Proxmox notation (e.g. "11264M"). Returns the task UPID or null.
   * With `digest`, the resize task fails (`checksum mismatch`) unless the config still has it.
   */
  resizeDisk(node: string, vmid: number, disk: string, size: string, o?: ResizeOptions): Promise<string | null>;
}

export interface ProxmoxApi extends ProxmoxReadApi, ProxmoxWriteApi {}

/**
 * Creating, destroying and migrating a VM: only `pve-nfs-csi move` uses these, to carry a disk to
 * another host inside a stopped helper VM (offline migration). They need VM.Allocate and
 * VM.Migrate, which the CSI role does not have. Each returns the task's UPID. Like
 * ProxmoxWriteApi, only the ownership port sends them (the mover's permits, ownership-day2.ts).
 */
export interface ProxmoxVmLifecycleWrite {
  /** POST /nodes/{node}/qemu: a stopped VM without new disks; `options` are config keys. */
  createVm(node: string, vmid: number, options: Record<string, string>, o?: CallOptions): Promise<string>;
  /** DELETE /nodes/{node}/qemu/{vmid}: frees the volumes the VM owns that its config references. */
  destroyVm(node: string, vmid: number, o?: CallOptions): Promise<string>;
  /** POST …/migrate: offline migration with the local disks the config references. */
  migrateVm(node: string, vmid: number, target: string, o?: CallOptions): Promise<string>;
}

export interface ProxmoxVmLifecycleRead {
  /** GET …/tasks/{upid}/log: the task's log lines. */
  taskLog(node: string, upid: string, o?: CallOptions): Promise<string[]>;
}

export interface ProxmoxVmLifecycle extends ProxmoxVmLifecycleRead, ProxmoxVmLifecycleWrite {}

/**
 * Snapshots, linked clones and disk reassignment (docs/snapshots.md, "Proxmox: what the API
 * allows a token"): the controller's thin copies of one disk. VM.Snapshot, VM.Clone and
 * VM.Allocate on the helper VMs, which the CSI role has only when snapshots are wanted. Each
 * returns the task's UPID.
 */
export interface ProxmoxSnapshotApi {
  /** POST …/qemu/{vmid}/snapshot: a disk-only snapshot of every drive of the VM. */
  snapshotVm(node: string, vmid: number, snapname: string, o?: CallOptions): Promise<string>;
  /** DELETE …/qemu/{vmid}/snapshot/{snapname}, with `force` (a missing volume snapshot is a warning). */
  deleteVmSnapshot(node: string, vmid: number, snapname: string, o?: CallOptions): Promise<string>;
  /** POST …/qemu/{vmid}/clone from a snapshot with full=0: linked clones of its drives. */
  linkedClone(
    node: string,
    vmid: number,
    req: { newid: number; snapname: string; name: string; description: string },
    o?: CallOptions,
  ): Promise<string>;
  /** POST …/qemu/{vmid}/move_disk with target-vmid: renames the disk to vm-<target>-disk-N. */
  reassignDisk(
    node: string,
    vmid: number,
    req: { disk: string; targetVmid: number; targetDisk: string; digest: string; targetDigest: string },
    o?: CallOptions,
  ): Promise<string>;
}
