// For a value the simulator's own logic guarantees but the types cannot see (a parameter the route
// schema requires, a regex group that is not optional): the value, or an Error naming what was
// missing, which the HTTP server answers with a 500. A non-null assertion would fail later as an
// unrelated TypeError.
export function defined<T>(value: T | null | undefined, what: string): T {
  if (value === undefined || value === null) throw new Error(`simulator internal error: ${what} is missing`);
  return value;
}
