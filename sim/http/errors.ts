// Errors shaped the way the PVE API server answers them: the message (with the trailing newline
// Perl's `die "...\n"` leaves) goes into the body, its first line becomes the HTTP status text.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly errors?: Record<string, string>,
  ) {
    super(message.endsWith('\n') ? message : `${message}\n`);
  }
}

/** An answer pveproxy sends without a JSON body (errors before the API handler is reached). */
export class BareError extends ApiError {}

/** `die "...\n"` inside a handler: HTTP 500. */
export const fail = (message: string) => new ApiError(500, message);

/** raise_param_exc: HTTP 400 with per-parameter messages. */
export const paramError = (errors: Record<string, string>) =>
  new ApiError(400, 'Parameter verification failed.', errors);

/** raise_perm_exc: HTTP 403 naming the path and the missing privilege(s), when the caller says them. */
export const permError = (what?: string) =>
  new ApiError(403, what ? `Permission check failed (${what})` : 'Permission check failed');

/** How fork_worker writes an error into the task log: one line, exceptions with code and errors. */
export function taskErrorText(err: unknown): string {
  let text: string;
  if (err instanceof ApiError) {
    text = err.status === 500 ? err.message : `${err.status} ${err.message}`;
    for (const [k, v] of Object.entries(err.errors ?? {})) text += `${k}: ${v}\n`;
  } else if (err instanceof Error) {
    text = err.message;
  } else {
    text = String(err);
  }
  return text.replace(/\n+$/, '').replace(/\n/g, ' ');
}
