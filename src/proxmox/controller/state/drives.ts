// Reading a VM's drives: which scsiN slots are taken (current or pending), where a given disk
// sits (attached, being attached, being detached, or left over as unusedN), and its options.
import type { ConfigEntry } from '../../api/api.js';
import { MAX_SLOT, MIN_SLOT, isHelperWwn, isPvcIdWwn, wwnForSlot } from '../../contract.js';
import { parseVolid } from '../../volume-id.js';

export interface Drive {
  storage: string;
  disk: string;
  options: Record<string, string>;
}

/** Parses a drive property string (`storage:disk,key=value,…` or `file=storage:disk,…`). */
export function parseDrive(value: string): Drive | undefined {
  const parts = value.split(',');
  let file: string | undefined;
  const options: Record<string, string> = {};
  for (const [i, part] of parts.entries()) {
    const eq = part.indexOf('=');
    if (eq < 0) {
      if (i === 0) file = part;
      continue;
    }
    const k = part.slice(0, eq);
    const v = part.slice(eq + 1);
    if (k === 'file' || k === 'volume') file = v;
    else options[k] = v;
  }
  const vol = file ? parseVolid(file) : undefined;
  return vol ? { ...vol, options } : undefined;
}

export type Placement = 'attached' | 'attaching' | 'detaching';

export interface DiskSite {
  key: string;
  slot: number;
  placement: Placement;
  drive: Drive;
}

const SCSI_RE = /^scsi(\d+)$/;

export function slotOf(key: string): number | undefined {
  const m = SCSI_RE.exec(key);
  return m ? Number(m[1]) : undefined;
}

/** Slots in use: any scsiN with a current or a pending value (a pending delete still holds it). */
export function usedSlots(entries: readonly ConfigEntry[]): Set<number> {
  const used = new Set<number>();
  for (const e of entries) {
    const slot = slotOf(e.key);
    if (slot !== undefined && (e.value !== undefined || e.pending !== undefined)) used.add(slot);
  }
  return used;
}

export function freeSlots(entries: readonly ConfigEntry[]): number[] {
  const used = usedSlots(entries);
  const free: number[] = [];
  for (let s = MIN_SLOT; s <= MAX_SLOT; s++) if (!used.has(s)) free.push(s);
  return free;
}

const same = (d: Drive | undefined, storage: string, disk: string): d is Drive =>
  !!d && d.storage === storage && d.disk === disk;

/** True for an offline-expansion helper attachment (its WWN marks it), not a publish. */
export const isHelperSite = (site: DiskSite): boolean => isHelperWwn(site.drive.options.wwn);

/** Every scsiN entry that references the disk, with how far its change has got. */
export function sitesOf(entries: readonly ConfigEntry[], storage: string, disk: string): DiskSite[] {
  const sites: DiskSite[] = [];
  for (const e of entries) {
    const slot = slotOf(e.key);
    if (slot === undefined) continue;
    const current = e.value !== undefined ? parseDrive(e.value) : undefined;
    const pending = e.pending !== undefined ? parseDrive(e.pending) : undefined;
    if (same(current, storage, disk)) {
      const leaving = e.pendingDelete || (e.pending !== undefined && !same(pending, storage, disk));
      sites.push({ key: e.key, slot, placement: leaving ? 'detaching' : 'attached', drive: current });
    } else if (same(pending, storage, disk)) {
      sites.push({ key: e.key, slot, placement: 'attaching', drive: pending });
    }
  }
  return sites;
}

/**
 * Whether this driver (or upstream proxmox-csi-plugin, which uses the same scheme) can have put
 * the site there: a slot in scsi1..scsi30, a WWN that is absent (older attachments) or one of
 * the driver's schemes, and a disk that is not the VM's own (the driver's disks belong to its
 * controller VMID). Anything else — a boot disk on scsi0, a disk attached by hand with its own
 * WWN, the VM's own data disk — is the VM's business: never published, updated or unlinked.
 */
export function isDriverSite(site: DiskSite, vmid: number, owner: number | undefined): boolean {
  if (site.slot < MIN_SLOT || site.slot > MAX_SLOT) return false;
  if (owner !== undefined && owner === vmid) return false;
  const wwn = site.drive.options.wwn?.toLowerCase();
  return wwn === undefined || wwn === wwnForSlot(site.slot) || isHelperWwn(wwn) || isPvcIdWwn(wwn);
}

const OTHER_BUS_RE = /^(?:ide|sata|virtio|efidisk|tpmstate)\d+$/;

/**
 * Drive keys other than scsiN (ide, sata, virtio, efidisk, tpmstate) that reference the disk,
 * current or pending: a VM's own disks, which this driver never attaches anywhere else.
 */
export function otherBusKeysOf(entries: readonly ConfigEntry[], storage: string, disk: string): string[] {
  return entries
    .filter((e) => OTHER_BUS_RE.test(e.key))
    .filter((e) => [e.value, e.pending].some((v) => v !== undefined && same(parseDrive(v), storage, disk)))
    .map((e) => e.key);
}

/** unusedN entries that reference the disk (left behind by a detach). */
export function unusedOf(entries: readonly ConfigEntry[], storage: string, disk: string): string[] {
  return entries
    .filter((e) => /^unused\d+$/.test(e.key))
    .filter((e) => same(parseDrive(e.value ?? e.pending ?? ''), storage, disk))
    .map((e) => e.key);
}

/**
 * sitesOf, unusedOf and otherBusKeysOf of one VM for every disk its entries name, in one pass
 * (each value parsed once): keyed by storage NUL disk, each list in the entries' order.
 */
export function drivesByDisk(
  entries: readonly ConfigEntry[],
): Map<string, { sites: DiskSite[]; unused: string[]; otherBus: string[] }> {
  const out = new Map<string, { sites: DiskSite[]; unused: string[]; otherBus: string[] }>();
  const of = (d: Drive) => {
    const k = `${d.storage}\u0000${d.disk}`;
    let u = out.get(k);
    if (!u) out.set(k, (u = { sites: [], unused: [], otherBus: [] }));
    return u;
  };
  for (const e of entries) {
    const value = e.value;
    const pendingValue = e.pending;
    const slot = slotOf(e.key);
    if (slot !== undefined) {
      const current = value !== undefined ? parseDrive(value) : undefined;
      const pending = pendingValue !== undefined ? parseDrive(pendingValue) : undefined;
      if (current) {
        const leaving =
          e.pendingDelete || (pendingValue !== undefined && !same(pending, current.storage, current.disk));
        of(current).sites.push({ key: e.key, slot, placement: leaving ? 'detaching' : 'attached', drive: current });
      }
      if (pending && !same(current, pending.storage, pending.disk))
        of(pending).sites.push({ key: e.key, slot, placement: 'attaching', drive: pending });
    } else if (OTHER_BUS_RE.test(e.key)) {
      const ds = [value, pendingValue].flatMap((v) => (v !== undefined ? [parseDrive(v)] : []));
      const seen = new Set<string>();
      for (const d of ds) {
        if (!d || seen.has(`${d.storage}\u0000${d.disk}`)) continue;
        seen.add(`${d.storage}\u0000${d.disk}`);
        of(d).otherBus.push(e.key);
      }
    } else if (/^unused\d+$/.test(e.key)) {
      const d = parseDrive(value ?? pendingValue ?? '');
      if (d) of(d).unused.push(e.key);
    }
  }
  return out;
}

/** Builds entries from a plain config (when only GET …/config is available). */
export function entriesFromValues(values: Record<string, string>): ConfigEntry[] {
  return Object.entries(values).map(([key, value]) => ({ key, value }));
}

export function smbiosUuid(entries: readonly ConfigEntry[]): string | undefined {
  const raw = entries.find((e) => e.key === 'smbios1')?.value;
  const m = raw ? /(?:^|,)uuid=([0-9a-fA-F-]{36})/.exec(raw) : null;
  return m?.[1]?.toLowerCase();
}

/**
 * A drive property string with some options replaced (undefined = removed); the volume and
 * every other option stay as they were, in their order.
 */
export function withDriveOptions(value: string, changes: Record<string, string | undefined>): string {
  const parts = value.split(',');
  const out: string[] = [];
  const left = new Map(Object.entries(changes));
  for (const [i, part] of parts.entries()) {
    const eq = part.indexOf('=');
    const k = eq < 0 ? undefined : part.slice(0, eq);
    if (i === 0 || k === undefined || k === 'file' || k === 'volume' || !left.has(k)) {
      out.push(part);
      continue;
    }
    const v = left.get(k);
    left.delete(k);
    if (v !== undefined) out.push(`${k}=${v}`);
  }
  for (const [k, v] of left) if (v !== undefined) out.push(`${k}=${v}`);
  return out.join(',');
}

// qemu-server's defaults for options a drive line leaves out.
const DRIVE_DEFAULTS: Record<string, string> = { backup: '1' };

/** True when the drive already has these option values (absent = the Proxmox default). */
export function driveHasOptions(drive: Drive, changes: Record<string, string | undefined>): boolean {
  return Object.entries(changes).every(([k, want]) => {
    const have = drive.options[k] ?? DRIVE_DEFAULTS[k];
    if (want === undefined || have === undefined) return want === have;
    return have === want || (/^[\d.]+$/.test(have) && Number(have) === Number(want));
  });
}
