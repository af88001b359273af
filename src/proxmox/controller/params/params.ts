// StorageClass parameters (upstream names and meanings), the drive options they turn into, and
// sizes. What the node reads back (fstype, WWN schemes, slots) is in ../contract.ts.
import { parseCapacityRange } from '../../../csi/capacity.js';
import { InvalidArgument, OutOfRange } from '../../../errors.js';
import { FSTYPE_KEY, type FsTypeName } from '../../contract.js';
import type { DiskFormat } from '../../storage/kind.js';
import { AIO_MODES, CACHE_MODES, PROXMOX_PARAMETER_KEYS, PROXMOX_PARAMETERS } from '../../param-keys.js';

export { CACHE_MODES };
/** Keys the external-provisioner adds (`--extra-create-metadata`); carried, never interpreted. */
const PROVISIONER_PREFIX = 'csi.storage.k8s.io/';

export type AioMode = (typeof AIO_MODES)[number];
export type CacheMode = (typeof CACHE_MODES)[number];
export type FsType = FsTypeName;

export interface StorageParams {
  storage: string;
  /** `storageFormat`; checked against the storage's kind once its type is known (storage/kinds.ts). */
  format?: DiskFormat | undefined;
  cache?: CacheMode | undefined;
  aio?: AioMode | undefined;
  ssd: boolean;
  backup: boolean;
  iothread: boolean;
  diskIOPS?: number | undefined;
  diskMBps?: number | undefined;
  blockSize?: number | undefined;
  inodeSize?: number | undefined;
  fsType?: FsType | undefined;
}

const KNOWN = PROXMOX_PARAMETER_KEYS;

const P = PROXMOX_PARAMETERS;

const bad = (key: string, value: string, want: string) =>
  new InvalidArgument(`parameter "${key}": "${value}" is not valid; expected ${want}`);

/**
 * Upstream keys that exist for storages other than LVM-thin or for features we do not offer:
 * their "off" value is accepted (upstream's normalised volume context carries `replicate: "0"`),
 * anything else is refused with the reason. Only at CreateVolume: a PV's context is never refused.
 */
function refuseInapplicable(p: Record<string, string>): void {
  if (P.replicate.parse(p.replicate)) {
    throw new InvalidArgument(
      'parameter "replicate": zone replication (Proxmox storage replication of ZFS volumes) is not offered by this driver yet (omit the key or set false)',
    );
  }
  if (P.resizeRequired.parse(p.resizeRequired)) {
    throw new InvalidArgument(
      'parameter "resizeRequired": upstream sets it only on volumes restored from a snapshot; this driver sizes a restore at CreateVolume from the PVC (omit the key)',
    );
  }
  if (p.resizeSizeBytes !== undefined && p.resizeSizeBytes !== '' && !/^0+$/.test(p.resizeSizeBytes)) {
    throw new InvalidArgument(
      `parameter "resizeSizeBytes": "${p.resizeSizeBytes}" cannot be used: upstream sets it only on volumes restored from a snapshot; this driver sizes a restore at CreateVolume from the PVC (omit the key)`,
    );
  }
}

function parseValues(p: Record<string, string>): Omit<StorageParams, 'storage'> {
  return {
    cache: P.cache.parse(p.cache),
    aio: P.aio.parse(p.aio),
    ssd: P.ssd.parse(p.ssd),
    backup: P.backup.parse(p.backup),
    iothread: P.iothread.parse(p.iothread),
    diskIOPS: P.diskIOPS.parse(p.diskIOPS),
    diskMBps: P.diskMBps.parse(p.diskMBps),
    blockSize: P.blockSize.parse(p.blockSize),
    inodeSize: P.inodeSize.parse(p.inodeSize),
    fsType: P[FSTYPE_KEY].parse(p[FSTYPE_KEY]),
  };
}

/** CreateVolume parameters: strict; an unknown key is refused by name. */
export function parseCreateParameters(p: Record<string, string>): StorageParams {
  for (const key of Object.keys(p)) {
    if (!KNOWN.has(key) && !key.startsWith(PROVISIONER_PREFIX)) {
      throw new InvalidArgument(
        `parameter "${key}" is not known; valid keys: ${[...KNOWN].join(', ')} (and the provisioner's ${PROVISIONER_PREFIX}* keys)`,
      );
    }
  }
  refuseInapplicable(p);
  const storage = p.storage ?? '';
  if (storage === '')
    throw new InvalidArgument('parameter "storage" is required (the Proxmox storage id, e.g. local-lvm)');
  if (!/^[a-z][a-z0-9._-]*[a-z0-9]$/i.test(storage)) throw bad('storage', storage, 'a Proxmox storage id');
  P.encrypted.parse(p.encrypted); // validated here, read by the node from the volume context
  return { storage, format: P.storageFormat.parse(p.storageFormat), ...parseValues(p) };
}

/**
 * What CreateVolume returns as volume_context: the StorageClass parameters themselves (as
 * upstream does, so old and new PVs read alike) minus per-claim metadata. ControllerPublish
 * reads the drive options from it; the node reads blockSize, inodeSize and the fstype.
 */
export function volumeContextOf(p: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(p)) {
    if (k.startsWith(PROVISIONER_PREFIX) && k !== FSTYPE_KEY) continue;
    out[k] = v;
  }
  return out;
}

export interface DriveOptions {
  aio?: AioMode | undefined;
  backup: boolean;
  iothread: boolean;
  ssd: boolean;
  cache?: CacheMode | undefined;
  iops?: number | undefined;
  mbps?: number | undefined;
  readonly: boolean;
}

/**
 * Drive options at publish time from the volume context. Lenient about keys (a PV carries
 * attributes others added, e.g. the provisioner identity) but strict about the values it uses.
 */
export function driveOptionsFromContext(ctx: Record<string, string>, readonly: boolean): DriveOptions {
  const v = parseValues(Object.fromEntries(Object.entries(ctx).filter(([k]) => KNOWN.has(k))));
  return {
    ...(v.aio && { aio: v.aio }),
    backup: v.backup,
    iothread: v.iothread,
    ssd: v.ssd,
    cache: v.cache,
    iops: v.diskIOPS,
    mbps: v.diskMBps,
    readonly,
  };
}

/** The scsiN property string Proxmox stores, e.g. `local-lvm:vm-9999-pvc-x,backup=0,…,wwn=0x…`. */
export function driveString(storage: string, disk: string, o: DriveOptions, wwn: string): string {
  const parts = [`${storage}:${disk}`];
  if (o.aio) parts.push(`aio=${o.aio}`);
  parts.push(`backup=${o.backup ? 1 : 0}`);
  if (o.cache) parts.push(`cache=${o.cache}`);
  if (o.ssd) parts.push('discard=on');
  if (o.iops) parts.push(`iops_rd=${o.iops}`, `iops_wr=${o.iops}`);
  if (o.iothread) parts.push('iothread=1');
  if (o.mbps) parts.push(`mbps_rd=${o.mbps}`, `mbps_wr=${o.mbps}`);
  if (o.readonly) parts.push('ro=1');
  if (o.ssd) parts.push('ssd=1');
  parts.push(`wwn=${wwn}`);
  return parts.join(',');
}

/** A helper attachment is never backed up (a backup job may run while it exists) and needs no tuning. */
export const HELPER_DRIVE_OPTIONS: DriveOptions = { backup: false, iothread: false, ssd: false, readonly: false };

export const MiB = 1024 * 1024;
export const GiB = 1024 * MiB;
export const SIZE_STEP = 512 * MiB;
export const DEFAULT_SIZE = 10 * GiB;

/** Size of a new volume: rounded up to 512 MiB, 10 GiB when nothing is asked for. */
export function sizeForCreate(
  range: { requiredBytes?: string | number; limitBytes?: string | number } | null | undefined,
): number {
  const { required, limit } = parseCapacityRange(range);
  if (required === 0) {
    if (limit === 0 || limit >= DEFAULT_SIZE) return DEFAULT_SIZE;
    const fit = Math.floor(limit / SIZE_STEP) * SIZE_STEP;
    if (fit === 0)
      throw new OutOfRange(`capacity_range: limit_bytes ${limit} is below the smallest volume (${SIZE_STEP} bytes)`);
    return fit;
  }
  const size = Math.ceil(required / SIZE_STEP) * SIZE_STEP;
  if (limit > 0 && size > limit)
    throw new OutOfRange(
      `capacity_range: ${required} bytes rounded up to ${size} (512 MiB steps) exceeds limit_bytes ${limit}`,
    );
  return size;
}

/** True when an existing volume of `size` bytes satisfies the request's range. */
export function sizeFits(
  size: number,
  range: { requiredBytes?: string | number; limitBytes?: string | number } | null | undefined,
): boolean {
  const { required, limit } = parseCapacityRange(range);
  if (required === 0 && limit === 0) return size === DEFAULT_SIZE;
  return size >= required && (limit === 0 || size <= limit);
}

/** Target size of an expansion, same rounding; OutOfRange when it cannot fit the limit. */
export function sizeForExpand(
  range: { requiredBytes?: string | number; limitBytes?: string | number } | null | undefined,
): number {
  const { required, limit } = parseCapacityRange(range);
  if (required === 0) throw new InvalidArgument('capacity_range.required_bytes must be set for an expansion');
  const size = Math.ceil(required / SIZE_STEP) * SIZE_STEP;
  if (limit > 0 && size > limit)
    throw new OutOfRange(
      `capacity_range: ${required} bytes rounded up to ${size} (512 MiB steps) exceeds limit_bytes ${limit}`,
    );
  return size;
}
