// Size strings as Proxmox VE parses and prints them. Each API uses its own unit convention, so
// each gets its own parser instead of one lenient one that would accept what PVE refuses.

import { defined } from '../defined.js';

const KIB = 1024;
const UNIT: Record<string, number> = { K: KIB, M: KIB ** 2, G: KIB ** 3, T: KIB ** 4 };

/** The factor of a `[KMGT]` suffix group; 1 where there is none. */
function unitFactor(suffix: string | undefined): number {
  return suffix ? defined(UNIT[suffix], `size unit ${suffix}`) : 1;
}

/** `disk-size` property format (drive `size=`): bytes without unit, K/M/G/T suffixes. */
export function parseDiskSize(value: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)([KMGT])?$/.exec(value);
  if (!m) return undefined;
  const n = Number(m[1]) * unitFactor(m[2]);
  return Math.trunc(n);
}

/** PVE's format_size: the largest unit that represents the value exactly. */
export function formatDiskSize(bytes: number): string {
  const kb = Math.trunc(bytes / KIB);
  if (kb * KIB !== bytes) return String(bytes);
  const mb = Math.trunc(kb / KIB);
  if (mb * KIB !== kb) return `${kb}K`;
  const gb = Math.trunc(mb / KIB);
  if (gb * KIB !== mb) return `${mb}M`;
  const tb = Math.trunc(gb / KIB);
  if (tb * KIB !== gb) return `${gb}G`;
  return `${tb}T`;
}

/**
 * `size` of POST /nodes/{node}/storage/{storage}/content: KiB without unit, `M` (MiB) or `G` (GiB).
 * The schema pattern `\d+[MG]?` is checked separately; this returns KiB.
 */
export function parseAllocSizeKiB(value: string): number | undefined {
  let m = /^(\d+)$/.exec(value);
  if (m) return Number(m[1]);
  m = /^(\d+)M$/.exec(value);
  if (m) return Number(m[1]) * KIB;
  m = /^(\d+)G$/.exec(value);
  if (m) return Number(m[1]) * KIB * KIB;
  return undefined;
}

/** `size` of PUT /nodes/{node}/qemu/{vmid}/resize: absolute or `+` relative, bytes without unit. */
export function parseResizeSize(value: string, currentBytes: number): number | undefined {
  const m = /^(\+)?(\d+(?:\.\d+)?)([KMGT])?$/.exec(value);
  if (!m) return undefined;
  let n = Number(m[2]) * unitFactor(m[3]);
  if (m[1]) n += currentBytes;
  return Math.trunc(n);
}

/** LVM rounds logical volume sizes up to whole extents (4 MiB by default). */
export const LVM_EXTENT_BYTES = 4 * KIB * KIB;
export function roundUpToExtent(bytes: number): number {
  return Math.ceil(bytes / LVM_EXTENT_BYTES) * LVM_EXTENT_BYTES;
}

/** Config-file sizes such as `200G`, `512M`, or plain bytes. */
export function parseHumanSize(value: string | number, what: string): number {
  if (typeof value === 'number') return value;
  const n = parseDiskSize(value.trim());
  if (n === undefined) throw new Error(`${what}: cannot parse size '${value}' (use bytes or a K/M/G/T suffix)`);
  return n;
}
