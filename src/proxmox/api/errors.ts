// The one place where failures of Proxmox calls become the project's typed errors. What the
// proxmox-api package's messages say is read by package-errors.ts; task failures carry only the
// exit status text. Both are classified by the same rules so a lock timeout is Busy wherever
// it shows up.
import {
  AlreadyExists,
  Busy,
  CsiError,
  DeadlineExceeded,
  FailedPrecondition,
  InvalidArgument,
  NotFound,
  ResourceExhausted,
  Unavailable,
  Unimplemented,
  isCsiError,
} from '../../errors.js';
import { parseFailure } from './package-errors.js';
import { BASE_ROLE } from '../roles.js';

/** What to grant for a missing privilege: the base role's, or what snapshots and `move` add. */
function grantAdvice(privilege: string | undefined): string {
  if (privilege && !BASE_ROLE.privileges.includes(privilege))
    return `Snapshots, restores, clones and move need it beyond the base role (docs/proxmox-setup.md)`;
  return `Grant it a role with ${BASE_ROLE.privileges.join(' ')} (docs/proxmox-setup.md)`;
}

type Ctor = new (message: string, options?: { cause?: unknown }) => CsiError;

/** Classifies a Proxmox reason text; shared by HTTP errors and task exit statuses. */
export function kindOfReason(reason: string): Ctor | undefined {
  if (
    /can't lock file|got timeout|\bis locked\b|detected modified configuration|file changed? by other user|digest mismatch|checksum mismatch/i.test(
      reason,
    )
  )
    return Busy;
  if (/already exists/i.test(reason)) return AlreadyExists;
  if (
    /not enough (free )?space|no space left|insufficient (free )?space|out of space|exceeds? .*(free|avail)|\bis full\b/i.test(
      reason,
    )
  )
    return ResourceExhausted;
  if (
    /does not exist|no such |not found|unable to find|doesn't exist|is not available on node|hostname lookup '[^']*' failed/i.test(
      reason,
    )
  )
    return NotFound;
  return undefined;
}

export interface FailureContext {
  /** Cluster (region) name, for the message. */
  cluster: string;
  /** What was being done, e.g. "read config of VM 101 on hyper1". */
  what: string;
  tokenId?: string | undefined;
  /** Ticket login user (instead of tokenId). */
  username?: string | undefined;
  /** Set when the caller's own signal aborted the call. */
  aborted?: boolean | undefined;
  /** queryTimeout, for the message of a timed-out call. */
  timeoutMs?: number | undefined;
}

/** Maps any failure of a Proxmox call to a typed error with a message a person can act on. */
export function toCsiError(err: unknown, ctx: FailureContext): CsiError {
  if (isCsiError(err)) return err;
  const where = `Proxmox ${ctx.cluster}: ${ctx.what}`;
  if (ctx.aborted) return new DeadlineExceeded(`${where}: cancelled before Proxmox answered`, { cause: err });
  const f = parseFailure(err);
  if (f.transport) {
    const tls = /certificate|self[- ]signed|SSL|TLS|CERT_|unable to verify/i.test(f.reason);
    const hint = tls
      ? ' (TLS verification failed: set ca_file to the CA that signed the API certificate, or insecure: true)'
      : /abort/i.test(f.reason) && ctx.timeoutMs
        ? ` (no answer within ${ctx.timeoutMs} ms)`
        : '';
    return new Unavailable(`${where}: cannot reach the API: ${f.reason}${hint}`, { cause: err });
  }
  const status = f.status ?? 0;
  if (status === 401) {
    const creds = ctx.username
      ? `username (${ctx.username}) and password`
      : `token_id${ctx.tokenId ? ` (${ctx.tokenId})` : ''} and token_secret`;
    return new FailedPrecondition(`${where}: authentication failed (${f.reason}); check ${creds} in the config`, {
      cause: err,
    });
  }
  if (status === 403) {
    const m = /\(([^,()]+),\s*([^()]+)\)/.exec(f.reason);
    const [, path, privilege] = m ?? [];
    const missing = path && privilege ? `${privilege.trim()} on ${path.trim()}` : 'a privilege';
    return new FailedPrecondition(
      `${where}: permission denied (${f.reason}); ${ctx.username ? `the user ${ctx.username}` : `the API token${ctx.tokenId ? ` ${ctx.tokenId}` : ''}`} lacks ${missing}. ${grantAdvice(privilege?.trim())}`,
      { cause: err },
    );
  }
  if (status === 400) {
    const params = f.paramErrors
      ? ': ' +
        Object.entries(f.paramErrors)
          .map(([k, v]) => `${k}: ${v}`)
          .join('; ')
      : '';
    return new InvalidArgument(`${where}: Proxmox refused the parameters (${f.reason})${params}`, { cause: err });
  }
  const byReason = kindOfReason(f.reason);
  if (byReason) return new byReason(`${where}: ${f.reason}`, { cause: err });
  if (status === 404) return new NotFound(`${where}: ${f.reason}`, { cause: err });
  if (status === 501)
    return new Unimplemented(`${where}: not offered by this Proxmox version (${f.reason})`, { cause: err });
  return new Unavailable(`${where}: ${f.reason}${status ? ` (HTTP ${status})` : ''}`, { cause: err });
}

/** Refused because the config changed since the digest sent with it was read (nothing done). */
export const digestRefused = (err: unknown): boolean =>
  isCsiError(err, 'Aborted') && /checksum mismatch|detected modified configuration/i.test((err as Error).message);

const taskFailures = new WeakSet<object>();

/**
 * A task that ended with an error exit status. Proxmox answered, so the outcome is known: it is
 * an error (upstream reported success), retried only when it is a lock timeout.
 */
export function taskError(exitstatus: string, ctx: FailureContext): CsiError {
  const Kind = kindOfReason(exitstatus) ?? Unavailable;
  const err = new Kind(`Proxmox ${ctx.cluster}: ${ctx.what}: task failed: ${exitstatus}`);
  taskFailures.add(err);
  return err;
}

export const isTaskFailure = (e: unknown): boolean => typeof e === 'object' && e !== null && taskFailures.has(e);

/**
 * True when a failed mutating call may still have taken effect (no answer, or a server error),
 * so the caller must read state back before deciding.
 */
export function outcomeUncertain(err: unknown): boolean {
  if (!isCsiError(err)) return true;
  if (isTaskFailure(err)) return err.kind === 'Aborted';
  return (
    err.kind === 'Unavailable' ||
    err.kind === 'DeadlineExceeded' ||
    err.kind === 'Internal' ||
    err.kind === 'AlreadyExists' ||
    err.kind === 'Aborted'
  );
}
