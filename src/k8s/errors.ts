// Errors of the Kubernetes port: the API server's status code and reason (its Status object),
// so callers can tell "gone" (404), "changed under us" (409) and "not allowed" (403) apart.
export class KubeError extends Error {
  constructor(
    readonly status: number,
    /** The Status object's reason, e.g. NotFound, Conflict, AlreadyExists, Forbidden. */
    readonly reason: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'KubeError';
  }
}

export const isKubeError = (e: unknown, status?: number): e is KubeError =>
  e instanceof KubeError && (status === undefined || e.status === status);
/** A resourceVersion/uid precondition failed, or the object already exists. */
export const isConflict = (e: unknown): boolean => isKubeError(e, 409);
