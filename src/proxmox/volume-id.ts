// Volume handles in the upstream format `region/zone/storage/disk` (region = Proxmox cluster
// name from the config, zone = Proxmox node) and the disk names behind them.
import { createHash } from 'node:crypto';
import { isMarkerName } from './marker-name.js';

export interface VolumeRef {
  region: string;
  zone: string;
  storage: string;
  disk: string;
}

const REGION_RE = /^[^\s/]+$/;
// Upstream leaves the zone empty for shared storages.
const ZONE_RE = /^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$|^$/;
// Proxmox's pve-storage-id format.
const STORAGE_RE = /^[a-z][a-z0-9._-]*[a-z0-9]$/i;
// What Proxmox accepts for a custom disk name: `vm-<vmid>-` then LVM name characters; on a file
// storage (dir, NFS, CIFS) the volume name is `<vmid>/vm-<vmid>-….<raw|qcow2>` (Plugin.pm
// alloc_image), the directory being the owner's.
const DISK_RE = /^(?:(\d+)\/)?vm-(\d+)-[A-Za-z0-9+_.-]+$/;

function diskMatch(disk: string): RegExpExecArray | undefined {
  const m = DISK_RE.exec(disk);
  if (!m) return undefined;
  if (m[1] !== undefined && (m[1] !== m[2] || !/\.(raw|qcow2)$/.test(disk))) return undefined;
  return m;
}

/**
 * Parses a volume handle; undefined when it is not one of ours (callers decide what that means).
 * Upstream's file-storage handles have five segments (`region/zone/storage/9999/vm-9999-….raw`):
 * everything after the storage is the disk.
 */
export function parseVolumeId(id: string): VolumeRef | undefined {
  const parts = id.split('/');
  if (parts.length !== 4 && parts.length !== 5) return undefined;
  const [region, zone, storage, ...rest] = parts as [string, string, string, ...string[]];
  const disk = rest.join('/');
  if (!REGION_RE.test(region) || !ZONE_RE.test(zone) || !STORAGE_RE.test(storage) || !diskMatch(disk)) return undefined;
  return { region, zone, storage, disk };
}

export function formatVolumeId(v: VolumeRef): string {
  return `${v.region}/${v.zone}/${v.storage}/${v.disk}`;
}

/** The VMID a disk name says owns it (`vm-<vmid>-…`). */
export function diskOwner(disk: string): number | undefined {
  const m = diskMatch(disk);
  return m ? Number(m[2]) : undefined;
}

/** Proxmox volume id, `storage:disk`. */
export const volidOf = (storage: string, disk: string): string => `${storage}:${disk}`;

export function parseVolid(volid: string): { storage: string; disk: string } | undefined {
  const at = volid.indexOf(':');
  if (at <= 0) return undefined;
  return { storage: volid.slice(0, at), disk: volid.slice(at + 1) };
}

/** Longest disk name we create; keeps handles short and well inside LVM's 127-character limit. */
export const MAX_DISK_NAME = 80;
// The characters pve-storage's parse_lvm_name allows. A name that would look like a
// VolumeAttributesClass marker (marker-name.ts; `_` never occurs in a Kubernetes name) is hashed
// too, so no disk can be taken for another disk's marker.
const NAME_CHARS_RE = /^[A-Za-z0-9_.-]+$/;

/**
 * `vm-<controllerVmId>-<pv name>`, exactly as upstream names it, for every name Kubernetes
 * produces (`pvc-<uid>`). A name LVM cannot take or that would be too long gets a readable
 * prefix plus a hash of the full name, so the mapping stays deterministic and idempotent.
 */
export function diskNameFor(controllerVmId: number, name: string): string {
  const prefix = `vm-${controllerVmId}-`;
  if (NAME_CHARS_RE.test(name) && prefix.length + name.length <= MAX_DISK_NAME && !isMarkerName(prefix + name))
    return prefix + name;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 16);
  const room = MAX_DISK_NAME - prefix.length - hash.length - 1;
  const hashed = (chars: RegExp) => {
    const readable = name.replace(chars, '-').slice(0, room).replace(/-+$/, '');
    return `${prefix}${readable ? readable + '-' : ''}${hash}`;
  };
  const disk = hashed(/[^A-Za-z0-9_.-]/g);
  return isMarkerName(disk) ? hashed(/[^A-Za-z0-9.-]/g) : disk;
}
