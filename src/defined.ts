// For a value the code's own logic guarantees but the types cannot see (a regex group that is
// not optional, the last element of a list known to be non-empty): the value, or an INTERNAL
// error that names what was missing. A non-null assertion instead would fail later, somewhere
// else, as an unrelated TypeError.
import { Internal } from './errors.js';

export function defined<T>(value: T | null | undefined, what: string): T {
  if (value === undefined || value === null) throw new Internal(`internal error: ${what} is missing`);
  return value;
}
