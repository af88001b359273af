// VolumeAttributesClass parameters (CSI mutable_parameters) of Proxmox volumes: which keys may
// change after creation, how a change is remembered while the disk is attached nowhere, and how
// it turns into drive options.
//
// Upstream lets `backup`, `diskIOPS` and `diskMBps` change: all three are options of the drive
// line (`backup=`, `iops_rd/iops_wr=`, `mbps_rd/mbps_wr=`) that qemu-server applies to a running
// VM at once (throttling through QEMU, backup in the config only). They are not properties of
// the disk, and a detached disk has no drive line. The volume context is immutable and the
// LVM-thin storage keeps no notes or attributes (pve-storage refuses `notes` for it), so the
// values of the last modification are kept in Proxmox itself as the NAME of an empty marker
// volume beside the disk: `<disk>_vac<seq>-b1-i500-m40` (4 MiB, thin, never attached; the name's
// rules are in ../../marker-name.ts). ControllerPublish applies the newest marker over the volume
// context; DeleteVolume removes the markers first.
import { InvalidArgument } from '../../../errors.js';
import { boolSpelling } from '../../../csi/param-def.js';
import type { StorageContentItem } from '../../api/api.js';
import { PROXMOX_PARAMETER_KEYS } from '../../param-keys.js';
import { FSTYPE_KEY } from '../../contract.js';
import type { DriveOptions } from './params.js';
import { parseVolid } from '../../volume-id.js';
import { type MarkerValues, parseMarker } from '../../marker-name.js';

export { isMarkerName, markerName, parseMarker } from '../../marker-name.js';

/** Values a modification sets; a key left out keeps its earlier value. 0 = no limit. */
export type MutableValues = MarkerValues;

export const MUTABLE_KEYS = ['backup', 'diskIOPS', 'diskMBps'] as const;
// Every other StorageClass key is fixed at creation: it decides the disk's place or filesystem,
// or is a drive option qemu-server leaves pending until the VM restarts (aio, cache, discard/ssd,
// iothread).
const IMMUTABLE_KEYS: ReadonlySet<string> = new Set([...PROXMOX_PARAMETER_KEYS, FSTYPE_KEY]);

function count(key: string, v: string): number {
  if (!/^\d+$/.test(v) || !Number.isSafeInteger(Number(v))) {
    throw new InvalidArgument(
      `mutable parameter "${key}": "${v}" is not valid; expected a whole number ≥ 0 (0 removes the limit)`,
    );
  }
  return Number(v);
}

/** Strict: every key must be one of MUTABLE_KEYS; an empty map changes nothing. */
export function parseMutableParameters(p: Record<string, string>): MutableValues {
  const out: MutableValues = {};
  for (const [key, v] of Object.entries(p)) {
    if (key === 'backup') {
      const b = boolSpelling(v);
      if (b === undefined)
        throw new InvalidArgument(`mutable parameter "backup": "${v}" is not valid; expected true or false`);
      out.backup = b;
    } else if (key === 'diskIOPS') {
      out.iops = count(key, v);
    } else if (key === 'diskMBps') {
      out.mbps = count(key, v);
    } else if (key === 'replicateSchedule') {
      throw new InvalidArgument(
        'mutable parameter "replicateSchedule" is not supported: this driver does not set up Proxmox storage replication (it needs ZFS; volumes here are LVM-thin disks)',
      );
    } else if (IMMUTABLE_KEYS.has(key)) {
      throw new InvalidArgument(
        `parameter "${key}" cannot be changed by a VolumeAttributesClass; mutable keys: ${MUTABLE_KEYS.join(', ')}`,
      );
    } else {
      throw new InvalidArgument(`mutable parameter "${key}" is not known; mutable keys: ${MUTABLE_KEYS.join(', ')}`);
    }
  }
  return out;
}

/** The values as StorageClass-style keys, for a new volume's context. */
export function mutableContext(m: MutableValues): Record<string, string> {
  const out: Record<string, string> = {};
  if (m.backup !== undefined) out.backup = m.backup ? 'true' : 'false';
  if (m.iops !== undefined) out.diskIOPS = String(m.iops);
  if (m.mbps !== undefined) out.diskMBps = String(m.mbps);
  return out;
}

export function mergeMutable(base: MutableValues, change: MutableValues): MutableValues {
  return { ...base, ...Object.fromEntries(Object.entries(change).filter(([, v]) => v !== undefined)) };
}

/** Drive options with the modified values applied. */
export function applyMutable(o: DriveOptions, m: MutableValues): DriveOptions {
  return {
    ...o,
    ...(m.backup !== undefined ? { backup: m.backup } : {}),
    ...(m.iops !== undefined ? { iops: m.iops || undefined } : {}),
    ...(m.mbps !== undefined ? { mbps: m.mbps || undefined } : {}),
  };
}

export interface Marker {
  volid: string;
  seq: number;
  values: MutableValues;
  legacy: boolean;
}

/** Size of a marker volume: LVM's extent size, the smallest LV; thin, so it takes no data blocks. */
export const MARKER_BYTES = 4 * 1024 * 1024;

/**
 * The disk's markers in a storage listing, newest (highest sequence) first; both name forms, so
 * the numbering goes on above a marker of an older version that a listing shows.
 */
export function markersOf(items: readonly StorageContentItem[], storage: string, disk: string): Marker[] {
  const out: Marker[] = [];
  for (const item of items) {
    const vol = parseVolid(item.volid);
    if (!vol || vol.storage !== storage) continue;
    const m = parseMarker(vol.disk, disk);
    if (m) out.push({ volid: item.volid, seq: m.seq, values: m.values, legacy: m.legacy });
  }
  // at an equal sequence the current form wins
  return out.sort((a, b) => b.seq - a.seq || Number(a.legacy) - Number(b.legacy));
}

/** The drive-line options a modification sets (undefined = option removed, i.e. no limit). */
export function driveChanges(m: MutableValues): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  if (m.backup !== undefined) out.backup = m.backup ? '1' : '0';
  const limit = (n: number) => (n ? String(n) : undefined);
  if (m.iops !== undefined) Object.assign(out, { iops_rd: limit(m.iops), iops_wr: limit(m.iops) });
  if (m.mbps !== undefined) Object.assign(out, { mbps_rd: limit(m.mbps), mbps_wr: limit(m.mbps) });
  return out;
}
