// Authentication and privilege checks as pveproxy (PVE::HTTPServer::auth_handler) does them:
// - a ticket in the `PVEAuthCookie` cookie (or in the Authorization header) wins over an API
//   token; an invalid or expired one is 401 "permission denied - invalid PVE ticket";
// - with a ticket, every method but GET needs a valid `CSRFPreventionToken` header, else 401
//   "Permission denied - invalid csrf token" (API tokens are exempt);
// - `PVEAPIToken=USER@REALM!ID=SECRET` in the Authorization header;
// - nothing at all: 401 "No ticket". The reason is the HTTP status text.
// Privilege failures are 403 naming path and privilege.

import type { ClusterState } from '../model/types.js';
import { permError } from './errors.js';
import { verifyCsrfToken, verifyTicket } from './tickets.js';

/** Who a request runs as: an API token (`user@realm!name`) or a ticket user (`user@realm`). */
export interface Identity {
  id: string;
  kind: 'token' | 'ticket';
  privileges: Set<string>;
}

export type AuthOutcome = { ok: true; identity: Identity } | { ok: false; message: string };

/** PVE::APIServer::Formatter::extract_auth_value */
function extractAuthValue(header: string | undefined, key: string): string | undefined {
  if (!header) return undefined;
  const m = new RegExp(`(?:^|\\s)${key}(?:=| )([^;]*)`).exec(header);
  if (!m || !m[1]) return undefined;
  try {
    return decodeURIComponent(m[1]);
  } catch {
    return m[1];
  }
}

export interface AuthRequest {
  method: string;
  authorization?: string | undefined;
  cookie?: string | undefined;
  csrfToken?: string | undefined;
}

export function authenticate(state: ClusterState, req: AuthRequest, nowSec: number): AuthOutcome {
  const ticket = extractAuthValue(req.cookie, 'PVEAuthCookie') ?? extractAuthValue(req.authorization, 'PVEAuthCookie');
  if (ticket) {
    const userId = verifyTicket(state.authKey, ticket, nowSec, state.ticketLifetimeSec);
    const user = userId ? state.users.get(userId) : undefined;
    if (!user) return { ok: false, message: 'permission denied - invalid PVE ticket' };
    if (
      req.method !== 'GET' &&
      !verifyCsrfToken(state.authKey, user.id, req.csrfToken, nowSec, state.ticketLifetimeSec)
    ) {
      return { ok: false, message: 'Permission denied - invalid csrf token' };
    }
    return { ok: true, identity: { id: user.id, kind: 'ticket', privileges: user.privileges } };
  }
  const apiToken = extractAuthValue(req.authorization, 'PVEAPIToken');
  if (!apiToken) return { ok: false, message: 'No ticket' };
  const [, tokenId, secret] = /^(.*)=(.*)$/.exec(apiToken) ?? [];
  if (tokenId === undefined || secret === undefined) return { ok: false, message: 'no tokenid specified' };
  const [, tokenUser, tokenName] = /^(\S+@\S+)!([A-Za-z][A-Za-z0-9.\-_]+)$/.exec(tokenId) ?? [];
  if (tokenUser === undefined || tokenName === undefined) {
    return { ok: false, message: `'${tokenId}' is not a valid token ID` };
  }
  const token = state.tokens.get(tokenId);
  if (!token) {
    const userKnown = [...state.tokens.keys()].some((t) => t.startsWith(`${tokenUser}!`)) || state.users.has(tokenUser);
    return {
      ok: false,
      message: userKnown ? `no such token '${tokenName}' for user '${tokenUser}'` : `no such user ('${tokenUser}')`,
    };
  }
  if (token.secret !== secret) return { ok: false, message: 'invalid token value!' };
  return { ok: true, identity: { id: token.id, kind: 'token', privileges: token.privileges } };
}

/** Privileges are granted on `/` with propagation, so the path only matters for the message. */
export class Perms {
  constructor(readonly identity: Pick<Identity, 'id' | 'privileges'>) {}

  has(priv: string): boolean {
    return this.identity.privileges.has(priv);
  }

  /** $rpcenv->check: every privilege is needed. */
  check(path: string, privs: string[]): void {
    for (const p of privs) if (!this.has(p)) throw permError(`${path}, ${p}`);
  }

  /** check with `any => 1` / check_any: one of them is enough. */
  checkAny(path: string, privs: string[]): void {
    if (!privs.some((p) => this.has(p))) throw permError(`${path}, ${privs.join('|')}`);
  }
}
