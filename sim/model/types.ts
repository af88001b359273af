// The simulated cluster's state. Plain data, mutated only by the operations in sim/ops/.

export interface VolumeModel {
  node: string;
  storage: string;
  volname: string;
  ownerVmid: number;
  /** Real LV size (already rounded up to whole extents). */
  sizeBytes: number;
  /** raw on block storages; raw or qcow2 (the file's extension) on a file storage. */
  format: 'raw' | 'qcow2';
  ctime: number;
  /** Sparse file backing the volume when the backend has files; boot disks from the YAML have none. */
  filePath?: string;
  /**
   * Without a backing file: the bytes a guest wrote (admin POST /write), what the thin pool's
   * data usage counts for this volume. With one, the file's allocated blocks count instead.
   */
  writtenBytes?: number;
  /**
   * Its LVM-thin snapshots `snap_<volname>_<name>` (LvmThinPlugin volume_snapshot), by name:
   * read-only thin LVs that list_images never lists (its `^(vm|base)-` filter) and free_image
   * removes with the volume. With a backing file each is a frozen copy of the volume's bytes.
   */
  snapshots?: Map<string, VolumeSnapshotModel>;
}

export interface VolumeSnapshotModel {
  ctime: number;
  filePath?: string;
  /** Bytes a guest had written when it was taken (volumes without a backing file). */
  writtenBytes?: number;
}

/** The pve-storage plugin types the simulator models (sim/ops/plugins.ts). */
export const STORAGE_TYPES = ['lvmthin', 'lvm', 'zfspool', 'rbd', 'dir', 'nfs', 'cifs'] as const;
export type StorageType = (typeof STORAGE_TYPES)[number];

export interface StorageModel {
  id: string;
  /** The node it was defined on first; a shared storage is one model in every node's map. */
  node: string;
  type: StorageType;
  /**
   * storage.cfg `shared`: one set of volumes every node sees (RBD, NFS and CIFS always; LVM or
   * a directory when configured so). Volumes are then in use wherever a running VM holds them.
   */
  shared: boolean;
  /** LVM: the volume group; ZFS: the pool dataset; RBD: the pool; file storages: the path. */
  vgname: string;
  thinpool: string;
  totalBytes: number;
  /** Data already in the pool that the model does not track per volume (OS disks). */
  baseUsedBytes: number;
  content: string;
  /** LVM-thin over-provisions by default; false refuses allocations beyond the pool size. */
  overcommit: boolean;
  volumes: Map<string, VolumeModel>;
}

export interface NodeModel {
  name: string;
  online: boolean;
  maxcpu: number;
  maxmem: number;
  storages: Map<string, StorageModel>;
}

export interface VmModel {
  vmid: number;
  node: string;
  status: 'running' | 'stopped';
  /** Current config, values exactly as they would be written to the .conf file. */
  config: Map<string, string>;
  /** `[PENDING]` section without its `delete` line. */
  pending: Map<string, string>;
  /** Pending deletes; value true = forced (`!key`). Insertion order is the file order. */
  pendingDelete: Map<string, boolean>;
  /**
   * Snapshot sections (`[name]` of the config file, PVE::QemuServer write_vm_config): each
   * one's keys as written, `parent`, `snaptime` and the drive lines of that moment included.
   * The current config's `parent` key names the snapshot it descends from.
   */
  snapshots: Map<string, Map<string, string>>;
  startedAt: number;
  pid: number;
  /** The node before the last migration and when it moved (the resources listing may lag). */
  movedFrom?: { node: string; atMs: number };
}

export interface VersionInfo {
  version: string;
  release: string;
  repoid: string;
}

export interface TokenModel {
  /** `user@realm!name` */
  id: string;
  secret: string;
  privileges: Set<string>;
}

/** A PVE user that logs in with a password (`POST /access/ticket`), privileges on `/`. */
export interface UserModel {
  /** `user@realm` */
  id: string;
  password: string;
  privileges: Set<string>;
}

export interface ClusterState {
  name: string;
  version: VersionInfo;
  nodes: Map<string, NodeModel>;
  vms: Map<number, VmModel>;
  tokens: Map<string, TokenModel>;
  users: Map<string, UserModel>;
  /** Signs tickets and CSRF tokens (PVE: the authkey and the CSRF secret); new on every reset. */
  authKey: Buffer;
  /** PVE's `$ticket_lifetime` (2 h); settable so tests can see a ticket expire. */
  ticketLifetimeSec: number;
}
