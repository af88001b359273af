// Ticket login (src/proxmox/api/ticket-session.ts) against a fetch that answers by hand: an
// answer that is not JSON keeps the parse error as its cause; concurrent callers share one login,
// and a failed login is not kept for the next caller.
import t from 'tap';
import { TicketSession } from '../../../../src/proxmox/api/ticket-session.js';
import type { FetchLike, WireResponse } from '../../../../src/proxmox/api/transport.js';
import { isCsiError } from '../../../../src/errors.js';

const answer = (status: number, text: string): WireResponse => ({
  status,
  statusText: status === 200 ? 'OK' : 'authentication failure',
  ok: status === 200,
  headers: { get: () => null },
  body: null,
  text: () => Promise.resolve(text),
  json: () => Promise.resolve(JSON.parse(text) as unknown),
});
const TICKET = JSON.stringify({ data: { ticket: 'PVE:root@pam:1', CSRFPreventionToken: 'csrf' } });

function session(bodies: string[]) {
  let calls = 0;
  const fetch: FetchLike = async () => {
    calls++;
    await new Promise((r) => setTimeout(r, 5));
    return answer(200, bodies.shift() ?? TICKET);
  };
  const s = new TicketSession({
    apiBase: 'https://127.0.0.1:8006/api2/json',
    username: 'root@pam',
    password: 'pw',
    region: 'homelab',
    fetch,
  });
  return { s, calls: () => calls };
}

t.test('an answer that is not JSON: Unavailable with the parse error as its cause', async (t) => {
  const { s } = session(['<html>502 Bad Gateway</html>']);
  const e: unknown = await s.get().catch((x: unknown) => x);
  t.ok(isCsiError(e, 'Unavailable'));
  t.match((e as Error).message, /^Proxmox homelab: login as root@pam: the answer is not JSON: /);
  t.type((e as Error).cause, SyntaxError, 'the parser error is kept');
});

t.test('concurrent callers share one login; a failed one is not kept', async (t) => {
  const { s, calls } = session(['not json']);
  const failed = await Promise.allSettled([s.get(), s.get(), s.get()]);
  t.same(
    failed.map((r) => r.status),
    ['rejected', 'rejected', 'rejected'],
  );
  t.equal(calls(), 1, 'one login for the three');
  const ok = await Promise.all([s.get(), s.get()]);
  t.same(ok[0], { ticket: 'PVE:root@pam:1', CSRFPreventionToken: 'csrf' });
  t.equal(calls(), 2, 'the failure was not reused: one new login, shared');
  t.equal(s.logins.password, 1);
});
