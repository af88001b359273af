// Reading SCSI disks from sysfs. Proxmox hot-plugs each volume as a QEMU scsi-hd with a WWN; the
// guest kernel exposes it as /sys/bus/scsi/devices/H:C:T:L with vendor "QEMU" and
// wwid "naa.<wwn hex>". The root is a parameter so tests can build a fake tree.
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { isErrno } from './paths.js';
import { listOrEmpty, readOrEmpty } from './sysfs.js';

/**
 * Which disks are the driver's, as the driver says (src/proxmox/contract.ts): this adapter knows
 * no WWN scheme and no slot range of its own.
 */
export interface DriverDisks {
  /** True for a WWN (16 or 32 lowercase hex digits, no 0x) the driver gives its disks. */
  ownsWwn(wwnHex: string): boolean;
  /** The SCSI slots the driver attaches to (inclusive). */
  minSlot: number;
  maxSlot: number;
}

export interface ScsiDevice {
  hctl: string;
  host: number;
  channel: number;
  target: number;
  lun: number;
  vendor: string;
  wwid: string;
  /** Kernel block device name (`sdb`) once the disk driver has bound; undefined before. */
  blockName: string | undefined;
}

const HCTL = /^(\d+):(\d+):(\d+):(\d+)$/;

/** `0x5056432D49443031` or `5056…` → `5056432d49443031`; undefined when not a 64/128-bit hex WWN. */
export function normalizeWwn(raw: string): string | undefined {
  const hex = raw.trim().toLowerCase().replace(/^0x/, '');
  return /^[0-9a-f]{16}([0-9a-f]{16})?$/.test(hex) ? hex : undefined;
}

/** The WWN (lowercase hex, no 0x) in a sysfs `wwid` of the form `naa.<hex>`; undefined for other forms. */
export function wwnOfWwid(wwid: string): string | undefined {
  return /^naa\.([0-9a-f]+)$/i.exec(wwid.trim())?.[1]?.toLowerCase();
}

/** True for a QEMU disk whose wwid is one of the driver's WWNs. */
export function isDriverScsiDisk(d: { vendor: string; wwid: string }, disks: DriverDisks): boolean {
  const wwn = wwnOfWwid(d.wwid);
  return d.vendor === 'QEMU' && wwn !== undefined && disks.ownsWwn(wwn);
}

export async function listScsiDevices(sysfsRoot: string): Promise<ScsiDevice[]> {
  const base = path.join(sysfsRoot, 'bus', 'scsi', 'devices');
  const out: ScsiDevice[] = [];
  for (const name of (await listOrEmpty(base)).sort()) {
    const m = HCTL.exec(name);
    if (!m) continue; // host0, target0:0:0 …
    const dir = path.join(base, name);
    const [vendor, wwid, blocks] = await Promise.all([
      readOrEmpty(path.join(dir, 'vendor')),
      readOrEmpty(path.join(dir, 'wwid')),
      listOrEmpty(path.join(dir, 'block')),
    ]);
    out.push({
      hctl: name,
      host: Number(m[1]),
      channel: Number(m[2]),
      target: Number(m[3]),
      lun: Number(m[4]),
      vendor,
      wwid,
      blockName: blocks[0],
    });
  }
  return out;
}

/** The QEMU disk whose wwid is `naa.<wwn>`, if the kernel has it. */
export async function findScsiByWwn(sysfsRoot: string, wwn: string): Promise<ScsiDevice | undefined> {
  const want = `naa.${wwn.toLowerCase()}`;
  const devices = await listScsiDevices(sysfsRoot);
  return devices.find((d) => d.vendor === 'QEMU' && d.wwid.toLowerCase() === want);
}

/** Ask every SCSI host to scan all channels/targets/LUNs; returns how many hosts were asked. */
export async function rescanScsiHosts(sysfsRoot: string): Promise<number> {
  const base = path.join(sysfsRoot, 'class', 'scsi_host');
  let n = 0;
  for (const host of await listOrEmpty(base)) {
    if (!host.startsWith('host')) continue;
    try {
      await fs.writeFile(path.join(base, host, 'scan'), '- - -');
      n++;
    } catch (e) {
      if (!isErrno(e, 'ENOENT', 'EACCES', 'EPERM', 'EINVAL')) throw e;
    }
  }
  return n;
}

/**
 * Proxmox puts `scsiN` at LUN N on virtio-scsi controllers and at target N (LUN 0) on the
 * LSI/pvscsi ones; either way the number is the slot.
 */
export function slotOf(d: ScsiDevice): number {
  return d.lun > 0 ? d.lun : d.target;
}

/** The driver's slots taken by QEMU disks the driver did not attach (they limit how many it can). */
export async function foreignScsiSlots(sysfsRoot: string, disks: DriverDisks): Promise<number> {
  const slots = new Set<number>();
  for (const d of await listScsiDevices(sysfsRoot)) {
    if (d.vendor !== 'QEMU' || isDriverScsiDisk(d, disks)) continue;
    const slot = slotOf(d);
    if (slot >= disks.minSlot && slot <= disks.maxSlot) slots.add(slot);
  }
  return slots.size;
}
