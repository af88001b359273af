// CapacityRange as both drivers read it: the one place that decides what a size in a request
// may be. CSI sizes are int64; 0 means "not given". A negative, fractional or unsafe number is
// refused (OUT_OF_RANGE) by every RPC of every driver alike, instead of being read as 0.
import { OutOfRange } from '../errors.js';

export interface CapacityRangeLike {
  requiredBytes?: string | number | null;
  limitBytes?: string | number | null;
}

export interface Capacity {
  /** Bytes; 0 = not given. */
  required: number;
  /** Bytes; 0 = no limit. */
  limit: number;
}

function field(name: string, v: string | number | null | undefined): number {
  if (v === undefined || v === null || v === '') return 0;
  const n = typeof v === 'number' ? v : /^-?\d+$/.test(v.trim()) ? Number(v) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < 0)
    throw new OutOfRange(`capacity_range.${name} ${String(v)} is out of range (a whole number of bytes, 0 or more)`);
  return n;
}

/** Parses a CapacityRange; refuses negative sizes and a limit below the required size. */
export function parseCapacityRange(range: CapacityRangeLike | null | undefined): Capacity {
  const required = field('required_bytes', range?.requiredBytes);
  const limit = field('limit_bytes', range?.limitBytes);
  if (limit > 0 && limit < required)
    throw new OutOfRange(`capacity_range: limit_bytes ${limit} is below required_bytes ${required}`);
  return { required, limit };
}
