// For a value a test needs before it can go on (a response's message field, a regex group, a
// row found by a search): the value, or an error that names what was missing, instead of a
// non-null assertion that would turn into "cannot read properties of undefined" further on.

export class MissingValue extends Error {
  override name = 'MissingValue';
}

export function present<T>(value: T | null | undefined, what: string): T {
  if (value === null || value === undefined) throw new MissingValue(`${what}: missing`);
  return value;
}
