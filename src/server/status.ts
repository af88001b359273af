// The one place where the project's typed errors become gRPC status codes.
import { status, type ServiceError, Metadata } from '@grpc/grpc-js';
import { CsiError, type ErrorKind, programmingError } from '../errors.js';

const CODES: Record<ErrorKind, status> = {
  InvalidArgument: status.INVALID_ARGUMENT,
  NotFound: status.NOT_FOUND,
  AlreadyExists: status.ALREADY_EXISTS,
  FailedPrecondition: status.FAILED_PRECONDITION,
  ResourceExhausted: status.RESOURCE_EXHAUSTED,
  OutOfRange: status.OUT_OF_RANGE,
  Aborted: status.ABORTED,
  Unavailable: status.UNAVAILABLE,
  DeadlineExceeded: status.DEADLINE_EXCEEDED,
  Unimplemented: status.UNIMPLEMENTED,
  Internal: status.INTERNAL,
};

/**
 * Longest status message sent. The message travels in an HTTP/2 trailer (grpc-message); one
 * that repeats a hostile megabyte-long id overflows the header limits, and the call (and the
 * calls after it on the same connection, which a sidecar shares for every volume) then get no
 * answer before their deadlines. Real messages are far shorter.
 */
export const MAX_STATUS_MESSAGE = 1024;

function bounded(message: string): string {
  if (message.length <= MAX_STATUS_MESSAGE) return message;
  return `${message.slice(0, MAX_STATUS_MESSAGE)}… (${message.length - MAX_STATUS_MESSAGE} more characters)`;
}

export interface MappedError {
  code: status;
  message: string;
  /** True when the error was not one of ours, or wraps a bug: the caller logs `logged` with its stack. */
  unexpected: boolean;
  /** What to log: the bug itself when a typed error wraps one (its stack shows where), else the error. */
  logged?: unknown;
}

export function mapError(err: unknown): MappedError {
  if (err instanceof CsiError) {
    const bug = programmingError(err);
    return {
      code: CODES[err.kind],
      message: bounded(err.message),
      unexpected: bug !== undefined,
      ...(bug && { logged: bug }),
    };
  }
  const message = err instanceof Error ? err.message : String(err);
  return { code: status.INTERNAL, message: bounded(`internal error: ${message}`), unexpected: true, logged: err };
}

export function toServiceError(m: MappedError): ServiceError {
  const e = new Error(m.message) as ServiceError;
  e.code = m.code;
  e.details = m.message;
  e.metadata = new Metadata();
  return e;
}

// A code outside the enum (another gRPC version's) prints as its number.
export const codeName = (code: status): string => (Object.hasOwn(status, code) ? status[code] : String(code));
