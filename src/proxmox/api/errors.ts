// The one place where failures of Proxmox calls become the project's typed errors.
// The proxmox-api package throws plain Errors whose message carries method, URL, HTTP status,
// Proxmox's reason (sent as the status text) and the JSON body; task failures carry only the
// exit status text. Both are classified by the same rules so a lock timeout is Busy wherever
// it shows up.
import { defined } from '../../defined.js';
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

export const CSI_ROLE_PRIVILEGES = 'VM.Audit VM.Config.Disk Datastore.Allocate Datastore.AllocateSpace Datastore.Audit';

export interface ParsedFailure {
  method?: string | undefined;
  url?: string | undefined;
  status?: number | undefined;
  /** Proxmox's reason (status text), or the transport error. */
  reason: string;
  /** `errors` of a 400 answer: parameter → message. */
  paramErrors?: Record<string, string> | undefined;
  /** No HTTP answer was received: the request may or may not have reached Proxmox. */
  transport: boolean;
}

/** Status text prefix of the synthetic answer http-api.ts gives when no HTTP answer came. */
export const TRANSPORT_MARK = 'no answer from Proxmox:';

const HTTP_RE = /^(GET|POST|PUT|DELETE) (\S+) (?:return Error|connection failed with) (\d{3}) ([\s\S]*)$/;
const TRANSPORT_RE = /^FaILED to call (GET|POST|PUT|DELETE) (\S+)(?: cause by:([\s\S]*))?$/;
const CONTENT_TYPE_RE = /^(GET|POST|PUT|DELETE) (\S+) unexpected contentType "([^"]*)" status Line:(\d+)/;

function splitBody(rest: string): { reason: string; body?: unknown } {
  for (const sep of [': {"', ' return: {"']) {
    const at = rest.indexOf(sep);
    if (at >= 0) {
      const json = rest.slice(at + sep.length - 2);
      try {
        return { reason: rest.slice(0, at).trim(), body: JSON.parse(json) };
      } catch {
        return { reason: rest.slice(0, at).trim() };
      }
    }
  }
  return { reason: rest.trim() };
}

function paramErrorsOf(body: unknown): Record<string, string> | undefined {
  const errors = (body as { errors?: unknown } | undefined)?.errors;
  if (!errors || typeof errors !== 'object') return undefined;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(errors as Record<string, unknown>)) out[k] = String(v).trim();
  return Object.keys(out).length > 0 ? out : undefined;
}

/** Reads what the proxmox-api package put into its error message. */
export function parseFailure(err: unknown): ParsedFailure {
  const message = err instanceof Error ? err.message : String(err);
  let m = HTTP_RE.exec(message);
  if (m) {
    const { reason, body } = splitBody(defined(m[4], 'body of the HTTP error pattern'));
    const bodyMessage = (body as { message?: unknown } | undefined)?.message;
    if (m[3] === '599' && reason.startsWith(TRANSPORT_MARK)) {
      return { method: m[1], url: m[2], reason: reason.slice(TRANSPORT_MARK.length).trim(), transport: true };
    }
    return {
      method: m[1],
      url: m[2],
      status: Number(m[3]),
      reason: reason || (typeof bodyMessage === 'string' ? bodyMessage.trim() : '') || `HTTP ${m[3]}`,
      paramErrors: paramErrorsOf(body),
      transport: false,
    };
  }
  m = TRANSPORT_RE.exec(message);
  if (m) {
    const cause = m[3]?.trim() || causeMessage(err) || 'connection failed';
    return { method: m[1], url: m[2], reason: cause, transport: true };
  }
  m = CONTENT_TYPE_RE.exec(message);
  if (m) {
    return {
      method: m[1],
      url: m[2],
      status: Number(m[4]),
      reason: `unexpected content type "${m[3]}" (not a Proxmox API answer)`,
      transport: false,
    };
  }
  return { reason: message, transport: /fetch|socket|ECONN|EPIPE|ETIMEDOUT|aborted/i.test(message) };
}

function causeMessage(err: unknown): string | undefined {
  let c = (err as { cause?: unknown } | undefined)?.cause;
  for (let depth = 0; c && depth < 4; depth++) {
    const next = (c as { cause?: unknown }).cause;
    if (!next) return c instanceof Error ? c.message : String(c);
    c = next;
  }
  return undefined;
}

type Ctor = new (message: string, options?: { cause?: unknown }) => CsiError;

/** Classifies a Proxmox reason text; shared by HTTP errors and task exit statuses. */
export function kindOfReason(reason: string): Ctor | undefined {
  if (
    /can't lock file|got timeout|\bis locked\b|detected modified configuration|file changed by other user|digest mismatch/i.test(
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
      `${where}: permission denied (${f.reason}); ${ctx.username ? `the user ${ctx.username}` : `the API token${ctx.tokenId ? ` ${ctx.tokenId}` : ''}`} lacks ${missing}. Grant it a role with ${CSI_ROLE_PRIVILEGES}`,
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
