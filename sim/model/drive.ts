// Drive property strings (`scsiN: local-lvm:vm-9999-pvc-x,backup=0,...`) parsed and printed the way
// qemu-server does: `file` first without its key, other keys sorted, booleans as 0/1, `size` in the
// largest exact unit. A driver compares these strings, so the normal form matters.

import { defined } from '../defined.js';
import { formatDiskSize, parseDiskSize } from './sizes.js';

type PropType =
  | { kind: 'bool' }
  | { kind: 'int'; min?: number }
  | { kind: 'number' }
  | { kind: 'enum'; values: string[] }
  | { kind: 'string'; pattern?: RegExp }
  | { kind: 'size' };

const bool: PropType = { kind: 'bool' };
const int: PropType = { kind: 'int', min: 0 };
const num: PropType = { kind: 'number' };
const str: PropType = { kind: 'string' };

const COMMON: Record<string, PropType> = {
  file: str,
  media: { kind: 'enum', values: ['cdrom', 'disk'] },
  cache: { kind: 'enum', values: ['none', 'writethrough', 'writeback', 'unsafe', 'directsync'] },
  format: { kind: 'enum', values: ['raw', 'cow', 'qcow', 'qed', 'qcow2', 'vmdk', 'cloop'] },
  aio: { kind: 'enum', values: ['native', 'threads', 'io_uring'] },
  discard: { kind: 'enum', values: ['ignore', 'on'] },
  detect_zeroes: bool,
  serial: { kind: 'string', pattern: /^[-%a-zA-Z0-9_.~]{1,60}$/ },
  shared: bool,
  replicate: bool,
  backup: bool,
  snapshot: bool,
  ro: bool,
  size: { kind: 'size' },
  cyls: int,
  heads: int,
  secs: int,
  trans: { kind: 'enum', values: ['none', 'lba', 'auto'] },
  rerror: { kind: 'enum', values: ['ignore', 'report', 'stop'] },
  werror: { kind: 'enum', values: ['enospc', 'ignore', 'report', 'stop'] },
  'import-from': str,
};
for (const p of ['iops', 'iops_rd', 'iops_wr', 'iops_max', 'iops_rd_max', 'iops_wr_max']) COMMON[p] = int;
for (const p of ['iops_max_length', 'iops_rd_max_length', 'iops_wr_max_length']) COMMON[p] = int;
for (const p of ['bps', 'bps_rd', 'bps_wr', 'bps_max_length', 'bps_rd_max_length', 'bps_wr_max_length'])
  COMMON[p] = int;
for (const p of ['mbps', 'mbps_rd', 'mbps_wr', 'mbps_max', 'mbps_rd_max', 'mbps_wr_max']) COMMON[p] = num;

const SCSI_ONLY: Record<string, PropType> = {
  iothread: bool,
  ssd: bool,
  queues: { kind: 'int', min: 2 },
  product: { kind: 'string', pattern: /^[A-Za-z0-9\-_\s]{1,16}$/ },
  vendor: { kind: 'string', pattern: /^[A-Za-z0-9\-_\s]{1,8}$/ },
  scsiblock: bool,
  wwn: { kind: 'string', pattern: /^(0x)[0-9a-fA-F]{16}$/ },
};
const VIRTIO_ONLY: Record<string, PropType> = { iothread: bool };
const SATA_IDE_ONLY: Record<string, PropType> = {
  ssd: bool,
  wwn: { kind: 'string', pattern: /^(0x)[0-9a-fA-F]{16}$/ },
  model: str,
};

/** Each bus and how many slots it has. */
export const DRIVE_BUSES = { scsi: 31, virtio: 16, sata: 6, ide: 4 } as const;
export type DriveBus = keyof typeof DRIVE_BUSES;

function isDriveBus(s: string): s is DriveBus {
  return Object.hasOwn(DRIVE_BUSES, s);
}

/** `scsi3` → scsi and "3" (the digits as written); undefined for a key of no bus. */
function splitDriveKey(key: string): { bus: DriveBus; digits: string } | undefined {
  const [, bus, digits] = /^(scsi|virtio|sata|ide)(\d+)$/.exec(key) ?? [];
  return bus !== undefined && digits !== undefined && isDriveBus(bus) ? { bus, digits } : undefined;
}

export function isDriveKey(key: string): boolean {
  const split = splitDriveKey(key);
  if (!split) return false;
  const n = Number(split.digits);
  return String(n) === split.digits && n < DRIVE_BUSES[split.bus];
}

/** The bus and index of a key the caller knows to be a drive's. */
export function driveSlot(key: string): { bus: DriveBus; index: number } {
  const { bus, digits } = defined(splitDriveKey(key), `the bus of drive key ${key}`);
  return { bus, index: Number(digits) };
}

function schemaFor(key: string): Record<string, PropType> {
  const { bus } = driveSlot(key);
  if (bus === 'scsi') return { ...COMMON, ...SCSI_ONLY };
  if (bus === 'virtio') return { ...COMMON, ...VIRTIO_ONLY };
  return { ...COMMON, ...SATA_IDE_ONLY };
}

export interface Drive {
  /** volume id (`storage:volname`), new-disk spec (`storage:SIZE_GiB`), absolute path, `none` or `cdrom`. */
  file: string;
  opts: Record<string, string>;
}

/** Thrown with the text PVE puts into `errors.<key>` of a 400 answer. */
export class DriveFormatError extends Error {}

const BOOL_TRUE = /^(1|true|yes|on)$/i;
const BOOL_FALSE = /^(0|false|no|off)$/i;

function checkValue(key: string, prop: string, t: PropType, raw: string): string {
  const fail = (why: string) => new DriveFormatError(`invalid format - format error\n${key}.${prop}: ${why}\n`);
  switch (t.kind) {
    case 'bool':
      if (BOOL_TRUE.test(raw)) return '1';
      if (BOOL_FALSE.test(raw)) return '0';
      throw fail(`type check ('boolean') failed - got '${raw}'`);
    case 'int':
      if (!/^-?\d+$/.test(raw)) throw fail(`type check ('integer') failed - got '${raw}'`);
      if (t.min !== undefined && Number(raw) < t.min) throw fail(`value must have a minimum value of ${t.min}`);
      return String(Number(raw));
    case 'number':
      if (!/^-?\d+(\.\d+)?$/.test(raw)) throw fail(`type check ('number') failed - got '${raw}'`);
      return raw;
    case 'enum':
      if (!t.values.includes(raw))
        throw fail(`value '${raw}' does not have a value in the enumeration '${t.values.join(', ')}'`);
      return raw;
    case 'string':
      if (t.pattern && !t.pattern.test(raw)) throw fail('value does not match the regex pattern');
      return raw;
    case 'size': {
      const n = parseDiskSize(raw);
      if (n === undefined) throw fail(`unable to parse size '${raw}'`);
      return String(n);
    }
  }
}

const NEW_DISK_RE = /^(?:([^/:\s]+):)?(\d+(?:\.\d+)?)$/;

export function isNewDiskSpec(file: string): boolean {
  return NEW_DISK_RE.test(file);
}

export function parseNewDiskSpec(file: string): { storage?: string; sizeGiB: number } {
  const m = defined(NEW_DISK_RE.exec(file), `new-disk spec ${file}`);
  return m[1] ? { storage: m[1], sizeGiB: Number(m[2]) } : { sizeGiB: Number(m[2]) };
}

function checkFile(key: string, file: string): void {
  if (file === 'none' || file === 'cdrom' || file.startsWith('/')) return;
  if (NEW_DISK_RE.test(file)) return;
  if (!/^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$/i.test(file)) {
    throw new DriveFormatError(
      `invalid format - format error\n${key}.file: invalid format - unable to parse volume ID '${file}'\n`,
    );
  }
}

/** Parses a drive property string; `size` is kept in bytes internally. */
export function parseDrive(key: string, value: string): Drive {
  const schema = schemaFor(key);
  const opts: Record<string, string> = {};
  let file: string | undefined;
  for (const part of value.split(',')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    let prop: string;
    let raw: string;
    if (eq < 0) {
      if (file !== undefined) {
        throw new DriveFormatError(
          `invalid format - format error\n${key}.file: duplicate key in comma-separated list property\n`,
        );
      }
      prop = 'file';
      raw = part;
    } else {
      prop = part.slice(0, eq);
      raw = part.slice(eq + 1);
    }
    const t = schema[prop];
    if (!t) {
      throw new DriveFormatError(
        `invalid format - format error\n${key}.${prop}: property is not defined in schema and the schema does not allow additional properties\n`,
      );
    }
    if (prop === 'file') {
      if (file !== undefined) {
        throw new DriveFormatError(
          `invalid format - format error\n${key}.file: duplicate key in comma-separated list property\n`,
        );
      }
      file = raw;
      continue;
    }
    if (opts[prop] !== undefined) {
      throw new DriveFormatError(
        `invalid format - format error\n${key}.${prop}: duplicate key in comma-separated list property\n`,
      );
    }
    opts[prop] = checkValue(key, prop, t, raw);
  }
  if (file === undefined || file === '') {
    throw new DriveFormatError(
      `invalid format - format error\n${key}.file: property is missing and it is not optional\n`,
    );
  }
  checkFile(key, file);
  return { file, opts };
}

export function printDrive(drive: Drive): string {
  const parts = [drive.file];
  for (const [k, v] of Object.entries(drive.opts).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    parts.push(`${k}=${k === 'size' ? formatDiskSize(Number(v)) : v}`);
  }
  return parts.join(',');
}

export function normalizeDrive(key: string, value: string): string {
  return printDrive(parseDrive(key, value));
}

export function isCdrom(drive: Drive): boolean {
  return drive.file === 'cdrom' || drive.opts.media === 'cdrom';
}

/** `storage:volname` split; undefined for paths and `none`. */
export function parseVolid(volid: string): { storage: string; volname: string } | undefined {
  const [, storage, volname] = /^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$/i.exec(volid) ?? [];
  return storage !== undefined && volname !== undefined ? { storage, volname } : undefined;
}

/** Owner VMID of an image volume name (`vm-<vmid>-...`, `base-<vmid>-...`, a file storage's `<vmid>/vm-…`). */
export function volumeOwner(volname: string): number | undefined {
  const m = /^(?:\d+\/)?(?:vm|base)-(\d+)-\S+$/.exec(volname);
  return m ? Number(m[1]) : undefined;
}
