// How a value read from YAML or JSON becomes text, for a setting or a message: scalars as they
// were written, anything else as JSON — never "[object Object]".
export function scalarText(v: unknown): string {
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint' || v === undefined) return String(v);
  if (typeof v === 'object') return JSON.stringify(v); // null included
  return typeof v; // a function or symbol: YAML and JSON have none
}
