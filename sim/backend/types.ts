// Ports between the simulated API and the host: sparse files that back volumes, and the hot-plug
// of those files into "running VMs" (nothing, loop devices, or a QEMU guest over QMP).

export interface VmRef {
  vmid: number;
  /** VM name = Kubernetes node name; the loop backend names its per-VM link directory after it. */
  name: string;
  node: string;
}

export interface PlugDisk {
  /** Config key, e.g. `scsi1`. */
  slot: string;
  bus: string;
  index: number;
  filePath: string;
  /** `0x` + 16 hex digits, from the drive's `wwn=` option. */
  wwn?: string;
  /** I/O limits from the drive's iops and mbps options; absent when it has none. */
  limits?: IoLimits;
}

/** QEMU's throttle limits as qemu-server computes them from a drive line (0 = unlimited). */
export interface IoLimits {
  bps: number;
  bps_rd: number;
  bps_wr: number;
  iops: number;
  iops_rd: number;
  iops_wr: number;
}

export interface Hotplug {
  plug(vm: VmRef, disk: PlugDisk): Promise<void>;
  unplug(vm: VmRef, slot: string): Promise<void>;
  /** Makes the guest see a grown backing file (losetup -c / QMP block_resize). */
  resize(vm: VmRef, slot: string, sizeBytes: number): Promise<void>;
  /** New I/O limits for a plugged disk (qemu-server's set_io_throttle); loop devices keep none. */
  throttle(vm: VmRef, slot: string, limits: IoLimits): Promise<void>;
  close(): Promise<void>;
}

export interface FileStore {
  pathFor(node: string, storage: string, volname: string): string;
  create(path: string, sizeBytes: number): Promise<void>;
  resize(path: string, sizeBytes: number): Promise<void>;
  remove(path: string): Promise<void>;
  allocatedBytes(path: string): Promise<number>;
  /** Writes `bytes` of non-zero data at `offset` (a guest filling its disk: the blocks get allocated). */
  write(path: string, offset: number, bytes: number): Promise<void>;
  /**
   * Copies a volume's bytes into a new file of `sizeBytes` (pvesm export | pvesm import: dd with
   * conv=sparse, so zero blocks stay holes). `failAfterBytes` stops the copy there and throws, as
   * a broken pipe would (fault injection); the partial file is left for the caller to remove.
   */
  copy(from: string, to: string, sizeBytes: number, failAfterBytes?: number): Promise<void>;
  /**
   * A thin snapshot or linked clone of a volume: the same bytes in a new file, sharing blocks
   * where the host filesystem can (reflink), else copying only the allocated extents.
   */
  snapshot(from: string, to: string): Promise<void>;
  /** lvrename: the same blocks under a new name. */
  rename(from: string, to: string): Promise<void>;
}

export type BackendKind = 'none' | 'loop' | 'qmp';

export interface DiskBackend {
  readonly kind: BackendKind;
  /** Undefined for `none`: volumes are state only. */
  readonly files: FileStore | undefined;
  readonly hotplug: Hotplug;
  close(): Promise<void>;
}

/** Runs a host command; resolves stdout, rejects with an Error whose message carries stderr. */
export type Exec = (cmd: string, args: string[]) => Promise<string>;
