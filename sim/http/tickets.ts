// Tickets and CSRF prevention tokens as PVE::Ticket / PVE::AccessControl shape and check them:
// ticket `PVE:<user>:<8 hex digits of the creation time>::<signature>`, CSRF token
// `<8 hex digits>:<signature of "time:user">`. PVE signs tickets with RSA and CSRF tokens with an
// HMAC; an HMAC for both is enough here (nobody verifies our signatures but us). Both are valid
// from 300 s before (PVE's $auth_graceperiod, for clock skew) to the ticket lifetime after their
// time stamp; outside that window a ticket is "invalid PVE ticket", as on a real host.
import { createHmac, timingSafeEqual } from 'node:crypto';

export const AUTH_GRACE_SEC = 300;

const hex8 = (sec: number) => sec.toString(16).toUpperCase().padStart(8, '0');
const sign = (key: Buffer, data: string) => createHmac('sha256', key).update(data).digest('base64').replace(/=+$/, '');

function sameSig(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function fresh(stampHex: string, nowSec: number, lifetimeSec: number): boolean {
  const age = nowSec - Number.parseInt(stampHex, 16);
  return age >= -AUTH_GRACE_SEC && age <= lifetimeSec;
}

export function assembleTicket(key: Buffer, user: string, nowSec: number): string {
  const plain = `PVE:${user}:${hex8(nowSec)}`;
  return `${plain}::${sign(key, plain)}`;
}

/** The user of a valid, unexpired ticket, or undefined. */
export function verifyTicket(key: Buffer, ticket: string, nowSec: number, lifetimeSec: number): string | undefined {
  const [, plain, user, stamp, sig] = /^(PVE:(\S+):([0-9A-F]{8}))::(\S+)$/.exec(ticket) ?? [];
  if (plain === undefined || user === undefined || stamp === undefined || sig === undefined) return undefined;
  if (!sameSig(sig, sign(key, plain))) return undefined;
  return fresh(stamp, nowSec, lifetimeSec) ? user : undefined;
}

export function assembleCsrfToken(key: Buffer, user: string, nowSec: number): string {
  const stamp = hex8(nowSec);
  return `${stamp}:${sign(key, `csrf:${stamp}:${user}`)}`;
}

export function verifyCsrfToken(
  key: Buffer,
  user: string,
  token: string | undefined,
  nowSec: number,
  lifetimeSec: number,
): boolean {
  const [, stamp, sig] = (token && /^([A-Z0-9]{8}):(\S+)$/.exec(token)) || [];
  if (stamp === undefined || sig === undefined || !sameSig(sig, sign(key, `csrf:${stamp}:${user}`))) return false;
  return fresh(stamp, nowSec, lifetimeSec);
}
