// The one place where the project's typed errors become gRPC status codes.
import { status, type ServiceError, Metadata } from '@grpc/grpc-js';
import { CsiError, type ErrorKind } from '../errors.js';

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

export interface MappedError {
  code: status;
  message: string;
  /** True when the error was not one of ours: the caller logs it with its stack. */
  unexpected: boolean;
}

export function mapError(err: unknown): MappedError {
  if (err instanceof CsiError) return { code: CODES[err.kind], message: err.message, unexpected: false };
  const message = err instanceof Error ? err.message : String(err);
  return { code: status.INTERNAL, message: `internal error: ${message}`, unexpected: true };
}

export function toServiceError(m: MappedError): ServiceError {
  const e = new Error(m.message) as ServiceError;
  e.code = m.code;
  e.details = m.message;
  e.metadata = new Metadata();
  return e;
}

export const codeName = (code: status): string => status[code] ?? String(code);
