// CSI access mode names by their enum number, for values decoded as numbers as well as strings.
export const ACCESS_MODE_NAMES = [
  'UNKNOWN',
  'SINGLE_NODE_WRITER',
  'SINGLE_NODE_READER_ONLY',
  'MULTI_NODE_READER_ONLY',
  'MULTI_NODE_SINGLE_WRITER',
  'MULTI_NODE_MULTI_WRITER',
  'SINGLE_NODE_SINGLE_WRITER',
  'SINGLE_NODE_MULTI_WRITER',
] as const;

/** The mode's name whether the loader decoded the enum as a string or a number. */
export function accessModeName(mode: unknown): string {
  if (typeof mode === 'number') return ACCESS_MODE_NAMES[mode] ?? 'UNKNOWN';
  return typeof mode === 'string' ? mode : 'UNKNOWN';
}
