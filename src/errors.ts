// The project's typed errors. Adapters and services throw these; src/server/status.ts maps them
// to gRPC status codes in one place. Anything that is not a CsiError becomes INTERNAL.

export type ErrorKind =
  | 'InvalidArgument'
  | 'NotFound'
  | 'AlreadyExists'
  | 'FailedPrecondition'
  | 'ResourceExhausted'
  | 'OutOfRange'
  | 'Aborted'
  | 'Unavailable'
  | 'DeadlineExceeded'
  | 'Unimplemented'
  | 'Internal';

export class CsiError extends Error {
  readonly kind: ErrorKind;
  constructor(kind: ErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.kind = kind;
    this.name = `${kind}Error`;
  }
}

const make = (kind: ErrorKind) =>
  class extends CsiError {
    constructor(message: string, options?: { cause?: unknown }) {
      super(kind, message, options);
    }
  };

export const InvalidArgument = make('InvalidArgument');
export const NotFound = make('NotFound');
export const AlreadyExists = make('AlreadyExists');
export const FailedPrecondition = make('FailedPrecondition');
export const ResourceExhausted = make('ResourceExhausted');
export const OutOfRange = make('OutOfRange');
/** A concurrent operation holds the same key; the caller should retry later. */
export const Busy = make('Aborted');
export const Unavailable = make('Unavailable');
export const DeadlineExceeded = make('DeadlineExceeded');
export const Unimplemented = make('Unimplemented');
export const Internal = make('Internal');

export function isCsiError(e: unknown, kind?: ErrorKind): e is CsiError {
  return e instanceof CsiError && (kind === undefined || e.kind === kind);
}

/**
 * The bug in an error's cause chain, if there is one: what JavaScript throws for a wrong program
 * (TypeError, ReferenceError, RangeError, SyntaxError, EvalError, URIError). A typed error that
 * wraps one still answers with its own code, but the server logs the bug with its stack.
 * undici's `TypeError: fetch failed` is a network failure (its cause says which), not a bug.
 */
export function programmingError(e: unknown): Error | undefined {
  let c: unknown = e;
  for (let depth = 0; c instanceof Error && depth < 8; depth++) {
    const bug =
      c instanceof TypeError ||
      c instanceof ReferenceError ||
      c instanceof RangeError ||
      c instanceof SyntaxError ||
      c instanceof EvalError ||
      c instanceof URIError;
    if (bug && !(c instanceof TypeError && c.message === 'fetch failed')) return c;
    c = c.cause;
  }
  return undefined;
}
