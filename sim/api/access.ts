// /access/ticket (ticket login and renewal) and /access/permissions, as pve-access-control's
// API2/AccessControl.pm answers them. The ticket call needs no authentication (pveproxy lets
// `/access/ticket` through); every failure is 401 "authentication failure", after the same delay
// as other failed logins.
import { ApiError } from '../http/errors.js';
import { sleep } from '../locks.js';
import { defined } from '../defined.js';
import type { Route } from '../http/router.js';
import { assembleCsrfToken, assembleTicket, verifyTicket } from '../http/tickets.js';

const DEFAULT_ACL_PATHS = ['/', '/access', '/access/groups', '/nodes', '/pools', '/sdn', '/storage', '/vms'];

export const accessRoutes: Route[] = [
  {
    method: 'GET',
    template: '/access/ticket',
    world: true,
    schema: { properties: {} },
    handler: () => null,
  },
  {
    method: 'POST',
    template: '/access/ticket',
    world: true,
    schema: {
      properties: {
        username: { type: 'string', maxLength: 64 },
        realm: { type: 'string', optional: true },
        password: { type: 'string' },
        otp: { type: 'string', optional: true },
        path: { type: 'string', optional: true, maxLength: 64 },
        privs: { type: 'string', optional: true, maxLength: 64 },
        'new-format': { type: 'boolean', optional: true },
        'tfa-challenge': { type: 'string', optional: true },
      },
    },
    handler: async ({ sim, params }) => {
      let username = defined(params.username, 'username');
      if (params.realm) username += `@${params.realm}`;
      const state = sim.state;
      const now = sim.nowSec();
      const user = state.users.get(username);
      // "The secret password. This can also be a valid ticket." A ticket renews for its own user
      // (or root@pam's, for anyone).
      const ticketUser = verifyTicket(
        state.authKey,
        defined(params.password, 'password'),
        now,
        state.ticketLifetimeSec,
      );
      const ok =
        user &&
        ((ticketUser !== undefined && (ticketUser === username || ticketUser === 'root@pam')) ||
          user.password === params.password);
      if (!ok) {
        const delay = sim.faults.get().authFailureDelayMs;
        if (delay > 0) await sleep(delay);
        throw new ApiError(401, 'authentication failure');
      }
      if (params.path && params.privs) {
        const wanted = params.privs.split(/[,;\s]+/).filter(Boolean);
        if (!wanted.every((p) => user.privileges.has(p))) throw new ApiError(401, 'authentication failure');
        return { username };
      }
      return {
        username,
        ticket: assembleTicket(state.authKey, username, now),
        CSRFPreventionToken: assembleCsrfToken(state.authKey, username, now),
        clustername: state.name,
        cap: {},
      };
    },
  },
  {
    method: 'GET',
    template: '/access/permissions',
    schema: { properties: { userid: { type: 'string', optional: true }, path: { type: 'string', optional: true } } },
    handler: ({ sim, params, perms, user }) => {
      const userid = params.userid ?? user;
      const ownedToken = userid.startsWith(`${user}!`);
      if (userid !== user && !ownedToken) perms.check('/access', ['Sys.Audit']);
      const privs =
        sim.state.tokens.get(userid)?.privileges ?? sim.state.users.get(userid)?.privileges ?? new Set<string>();
      const map = Object.fromEntries([...privs].sort().map((p) => [p, 1]));
      if (privs.size === 0) return {};
      if (params.path) return { [params.path]: map };
      return Object.fromEntries(DEFAULT_ACL_PATHS.map((p) => [p, map]));
    },
  },
];
