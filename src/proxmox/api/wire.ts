// Reading values out of Proxmox's JSON where the proxmox-api package's generated types do not
// hold on the wire. PVE's JSON encoder writes a Perl scalar as it last held it, so an integer
// field can arrive as a string (`"vmid": "506"`, `"disk": "2843205632"`, reported against the
// real API in bpg/terraform-provider-proxmox#621 and #727), a boolean arrives as 0/1 (or "" for
// false), and a config value the types call boolean or number is whatever the config file held.
// Each helper accepts every form seen on the wire and nothing else.

/** A number, or an integer written as a string; anything else is `undefined`. */
export function num(v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isFinite(v) ? v : undefined;
  if (typeof v === 'string' && v.trim() !== '') {
    const n = Number(v);
    return Number.isFinite(n) ? n : undefined;
  }
  return undefined;
}

/** A Proxmox boolean: 1/0, true/false, "1"/"0"/"" (absent is false). */
export function flag(v: unknown): boolean {
  return v === 1 || v === true || v === '1';
}

/** A scalar as text (config values: strings, numbers, 0/1 booleans); objects and null are `undefined`. */
export function text(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  return undefined;
}

/** A JSON object, or an empty one for anything else (null data, an array). */
export function record(v: unknown): Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

/** A JSON array, or an empty one (Proxmox answers `data: null` for an empty list on some paths). */
export function rows<T>(v: T[] | null | undefined): T[] {
  return Array.isArray(v) ? v : [];
}

/**
 * A task id or nothing: the generated types say `string` for calls that answer a UPID, but with
 * `delay`/`background_delay` (or when the work was done inline) Proxmox answers `null`.
 */
export function upidOrNull(v: unknown): string | null {
  return typeof v === 'string' && v.startsWith('UPID:') ? v : null;
}
