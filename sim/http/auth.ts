// API token authentication and privilege checks as pveproxy does them: `PVEAPIToken=USER@REALM!ID=SECRET`
// in the Authorization header, 401 with the reason as status text, 403 naming path and privilege.

import type { ClusterState, TokenModel } from '../model/types.js';
import { permError } from './errors.js';

export type AuthOutcome = { ok: true; token: TokenModel } | { ok: false; message: string };

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

export function authenticate(state: ClusterState, authorization: string | undefined, cookie: string | undefined): AuthOutcome {
  const ticket = extractAuthValue(cookie, 'PVEAuthCookie') ?? extractAuthValue(authorization, 'PVEAuthCookie');
  if (ticket) return { ok: false, message: 'permission denied - invalid PVE ticket' };
  const apiToken = extractAuthValue(authorization, 'PVEAPIToken');
  if (!apiToken) return { ok: false, message: 'No ticket' };
  const m = /^(.*)=(.*)$/.exec(apiToken);
  if (!m) return { ok: false, message: 'no tokenid specified' };
  const tokenId = m[1]!;
  const secret = m[2]!;
  const idm = /^(\S+@\S+)!([A-Za-z][A-Za-z0-9.\-_]+)$/.exec(tokenId);
  if (!idm) return { ok: false, message: `'${tokenId}' is not a valid token ID` };
  const token = state.tokens.get(tokenId);
  if (!token) {
    const userKnown = [...state.tokens.keys()].some((t) => t.startsWith(`${idm[1]}!`));
    return {
      ok: false,
      message: userKnown ? `no such token '${idm[2]}' for user '${idm[1]}'` : `no such user ('${idm[1]}')`,
    };
  }
  if (token.secret !== secret) return { ok: false, message: 'invalid token value!' };
  return { ok: true, token };
}

/** Privileges are granted on `/` with propagation, so the path only matters for the message. */
export class Perms {
  constructor(readonly token: TokenModel) {}

  has(priv: string): boolean {
    return this.token.privileges.has(priv);
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
