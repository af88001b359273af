// What the proxmox-api package's thrown errors say, read in this one place. The package throws
// plain Errors whose message is the only carrier of method, URL, HTTP status, Proxmox's reason
// (pveproxy sends it as the status line's reason phrase) and the answer's JSON body. Its formats
// (ProxmoxEngine.doRequest, proxmox-api 1.1.x), pinned by test/integration/proxmox/package-errors.test.ts:
//   400, 401, 500:  `${method} ${url} return Error ${status} ${reason}: ${JSON.stringify(body)}`
//   other statuses: `${method} ${url} connection failed with ${status} ${reason} return: ${JSON}`
//   a body that is not application/json;charset=UTF-8:
//                   `${method} ${url} unexpected contentType "${ct}" status Line:${status} …`
//   fetch threw (twice: the package re-sends once): `FaILED to call ${method} ${url} cause by:…`
// `body` is Proxmox's JSON (`{"data":null,"message":…,"errors":{param: text}}`), or
// `{"data":null,"errors":"<text>"}` when the answer had no content type (pveproxy's bare errors,
// and 595/596 from its proxying to pvedaemon or another node, whose body is empty).

/** Status text prefix of the synthetic answer transport.ts gives when no HTTP answer came. */
export const TRANSPORT_MARK = 'no answer from Proxmox:';

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

const HTTP_RE = /^(GET|POST|PUT|DELETE) (\S+) (?:return Error|connection failed with) (\d{3}) ([\s\S]*)$/;
const TRANSPORT_RE = /^FaILED to call (GET|POST|PUT|DELETE) (\S+)(?: cause by:([\s\S]*))?$/;
const CONTENT_TYPE_RE = /^(GET|POST|PUT|DELETE) (\S+) unexpected contentType "([^"]*)" status Line:(\d+)/;

/**
 * Splits `reason: {json}` / `reason return: {json}`. The reason is free text (it may itself hold
 * `: {"`), so every separator is tried from the left until the rest parses as JSON.
 */
function splitBody(rest: string): { reason: string; body?: unknown } {
  const sep = /(?: return)?: (?=\{")/g;
  for (let m = sep.exec(rest); m; m = sep.exec(rest)) {
    try {
      const body: unknown = JSON.parse(rest.slice(m.index + m[0].length));
      return { reason: rest.slice(0, m.index).trim(), body };
    } catch {
      // not the separator: the reason goes on
    }
  }
  return { reason: rest.trim() };
}

function paramErrorsOf(body: unknown): Record<string, string> | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const errors = (body as { errors?: unknown }).errors;
  if (typeof errors !== 'object' || errors === null) return undefined;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(errors)) if (typeof v === 'string') out[k] = v.trim();
  return Object.keys(out).length > 0 ? out : undefined;
}

function bodyMessage(body: unknown): string {
  if (typeof body !== 'object' || body === null) return '';
  const { message, errors } = body as { message?: unknown; errors?: unknown };
  if (typeof message === 'string') return message.trim();
  // pveproxy's bare errors put the reason in the body, which the package keeps as `errors` text
  return typeof errors === 'string' ? errors.trim() : '';
}

/** Reads what the proxmox-api package put into its error message. */
export function parseFailure(err: unknown): ParsedFailure {
  const message = err instanceof Error ? err.message : typeof err === 'string' ? err : 'unknown failure';
  let m = HTTP_RE.exec(message);
  if (m) {
    const [, method, url, status = '', rest = ''] = m;
    const { reason, body } = splitBody(rest);
    if (status === '599' && reason.startsWith(TRANSPORT_MARK)) {
      return { method, url, reason: reason.slice(TRANSPORT_MARK.length).trim(), transport: true };
    }
    return {
      method,
      url,
      status: Number(status),
      reason: reason || bodyMessage(body) || `HTTP ${status}`,
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
      reason: `unexpected content type "${m[3] ?? ''}" (not a Proxmox API answer)`,
      transport: false,
    };
  }
  return { reason: message, transport: /fetch|socket|ECONN|EPIPE|ETIMEDOUT|aborted/i.test(message) };
}

/** The innermost message of an error's cause chain. */
function causeMessage(err: unknown): string | undefined {
  let c: unknown = err instanceof Error ? err.cause : undefined;
  for (let depth = 0; c instanceof Error && depth < 4; depth++) {
    if (!(c.cause instanceof Error)) return c.message;
    c = c.cause;
  }
  return undefined;
}

/**
 * qemu-server's `POST …/config` with `background_delay`: when the task ended within the wait with
 * an error, the call dies with `failed to update VM <vmid>: <exit status>` (API2/Qemu.pm). Returns
 * that exit status, so the caller can treat it as the task's failure.
 */
export function backgroundTaskExit(err: unknown): string | undefined {
  const f = parseFailure(err);
  if (f.transport) return undefined;
  return /^failed to update VM \d+: (.+)$/s.exec(f.reason)?.[1]?.trim();
}
