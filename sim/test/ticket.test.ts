// Ticket login as pveproxy and pve-access-control answer it: POST /access/ticket, the
// PVEAuthCookie cookie, the CSRFPreventionToken header on writes, expiry after the ticket
// lifetime, renewal with the ticket as password, and /access/permissions.
import t from 'tap';
import { startTestSim, type TestSim } from './fixtures/helpers.js';

const LIFETIME = 2;
const ts: TestSim = await startTestSim({ ticketLifetimeSeconds: LIFETIME });
t.teardown(() => ts.close());
const { sim } = ts;
// Every test here logs in as the default cluster's password user.
if (sim.username === undefined || sim.password === undefined)
  throw new Error('the default cluster has no password user');
const user = sim.username;
const pass = sim.password;
const [userName = ''] = user.split('@');

const login = (username: string, password: string) =>
  ts.callAs(undefined, 'POST', '/access/ticket', { username, password });
const asTicket = (ticket: string, csrf?: string) => ({
  Cookie: `PVEAuthCookie=${encodeURIComponent(ticket)}`,
  ...(csrf && { CSRFPreventionToken: csrf }),
});

async function raw(method: string, path: string, headers: Record<string, string>, params: Record<string, string> = {}) {
  // TestSim.call always adds the token header; a ticket must be the only credential here
  const { fetch } = await import('undici');
  const url = new URL(sim.url + path);
  const body = method === 'GET' ? undefined : new URLSearchParams(params).toString();
  if (method === 'GET') for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  const res = await fetch(url, {
    method,
    dispatcher: ts.agent,
    ...(body !== undefined && { body }),
    headers: { ...headers, ...(body !== undefined && { 'Content-Type': 'application/x-www-form-urlencoded' }) },
  });
  const text = await res.text();
  return {
    status: res.status,
    statusText: res.statusText,
    data: text ? (JSON.parse(text) as { data: unknown }).data : undefined,
  };
}

t.test('wrong password and unknown user: 401 "authentication failure"', async (t) => {
  t.ok(sim.username && sim.password, 'the default cluster has a password user');
  for (const [u, p] of [
    [user, 'wrong'],
    ['nobody@pve', 'x'],
    [userName, pass],
  ] as const) {
    const r = await login(u, p);
    t.equal(r.status, 401, u);
    t.equal(r.statusText, 'authentication failure');
  }
  const realm = await ts.callAs(undefined, 'POST', '/access/ticket', {
    username: userName,
    realm: 'pve',
    password: pass,
  });
  t.equal(realm.status, 200, 'realm as its own parameter is appended to the user name');
});

t.test('a ticket reads with the cookie alone; writes need the CSRF token', async (t) => {
  const r = await login(user, pass);
  t.equal(r.status, 200);
  const d = r.body?.data as { ticket: string; CSRFPreventionToken: string; username: string; clustername: string };
  t.match(d, { username: sim.username, clustername: 'homelab' });
  t.match(d.ticket, /^PVE:kubernetes-csi@pve:[0-9A-F]{8}::\S+$/);
  t.match(d.CSRFPreventionToken, /^[0-9A-F]{8}:\S+$/);

  const read = await raw('GET', '/nodes/hyper1/qemu/111/config', asTicket(d.ticket));
  t.equal(read.status, 200, 'GET needs no CSRF token');
  const path = '/nodes/hyper1/storage/local-lvm/content';
  const body = { vmid: '9999', filename: 'vm-9999-ticket-write', size: '1G' };
  const noCsrf = await raw('POST', path, asTicket(d.ticket), body);
  t.equal(noCsrf.status, 401);
  t.equal(noCsrf.statusText, 'Permission denied - invalid csrf token');
  const badCsrf = await raw(
    'POST',
    path,
    asTicket(
      d.ticket,
      d.CSRFPreventionToken.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A')),
    ),
    body,
  );
  t.equal(badCsrf.statusText, 'Permission denied - invalid csrf token', 'a forged token too');
  const ok = await raw('POST', path, asTicket(d.ticket, d.CSRFPreventionToken), body);
  t.equal(ok.status, 200, 'with the CSRF token the write runs: ' + ok.statusText);
  const token = await ts.call('POST', path, { ...body, filename: 'vm-9999-token-write' });
  t.equal(token.status, 200, 'API tokens need no CSRF token: ' + token.statusText);

  const forged = await raw('GET', '/version', asTicket(d.ticket.replace('kubernetes-csi@pve', 'root@pam')));
  t.equal(forged.statusText, 'permission denied - invalid PVE ticket', 'a ticket is signed');
});

t.test('permissions: the user has only its role; /access/permissions lists them', async (t) => {
  const d = (await login(user, pass)).body?.data as { ticket: string };
  const perms = await raw('GET', '/access/permissions', asTicket(d.ticket));
  t.equal(perms.status, 200);
  t.same(Object.keys((perms.data as Record<string, Record<string, number> | undefined>)['/'] ?? {}).sort(), [
    'Datastore.Allocate',
    'Datastore.AllocateSpace',
    'Datastore.Audit',
    'VM.Audit',
    'VM.Config.Disk',
  ]);
  const one = await ts.call('GET', '/access/permissions', { path: '/storage' });
  t.same(Object.keys(one.body?.data as object), ['/storage'], 'path narrows the dump');
  const other = await ts.call('GET', '/access/permissions', { userid: 'root@pam' });
  t.equal(other.status, 403, "another user's permissions need Sys.Audit on /access");
  const sys = await raw('GET', '/access/permissions', asTicket(d.ticket), { userid: 'root@pam' });
  t.equal(sys.status, 403, 'what is outside the role stays closed to the ticket too');
  // Tasks.pm: a user sees its own tasks and its tokens' ones, without Sys.Audit.
  await ts.admin.holdLock({ vmid: 101 }, 300);
  const upid = (await ts.call('POST', '/nodes/hyper1/qemu/101/config', { delete: 'scsi9' })).body?.data as string;
  const listed = await raw('GET', '/nodes/hyper1/tasks', asTicket(d.ticket), { source: 'active' });
  // …except in the active list: Tasks.pm checks those rows without splitting the token id off
  // the UPID's user, so `user@realm` never equals `user@realm!token` there.
  t.same(listed.data, [], "the active list does not show the user its token's running task");
  const st = await raw('GET', `/nodes/hyper1/tasks/${encodeURIComponent(upid)}/status`, asTicket(d.ticket));
  t.equal(st.status, 200, 'and may read its status');
  await ts.waitTask('hyper1', upid);
  const archive = await raw('GET', '/nodes/hyper1/tasks', asTicket(d.ticket));
  t.ok(
    (archive.data as Array<{ upid: string }>).some((r) => r.upid === upid),
    'the archive does (token split there)',
  );
});

t.test('expiry after the lifetime; renewal with the ticket as password', async (t) => {
  const d = (await login(user, pass)).body?.data as { ticket: string; CSRFPreventionToken: string };
  const renewed = await login(user, d.ticket);
  t.equal(renewed.status, 200, 'a valid ticket renews');
  const nd = renewed.body?.data as { ticket: string };
  const log = await ts.admin.requests(0);
  const last = log.entries.filter((e) => e.path.endsWith('/access/ticket')).at(-1);
  t.equal(last?.params?.password, '(ticket)', 'the request log never keeps a password');
  t.equal((await login('root@pam', d.ticket)).status, 401, 'a ticket does not log in as another user');

  await new Promise((r) => setTimeout(r, (LIFETIME + 1.2) * 1000));
  const old = await raw('GET', '/version', asTicket(d.ticket));
  t.equal(old.status, 401);
  t.equal(old.statusText, 'permission denied - invalid PVE ticket');
  t.equal((await raw('GET', '/version', asTicket(nd.ticket))).status, 401, 'the renewed one has expired as well');
  t.equal((await login(user, d.ticket)).status, 401, 'an expired ticket cannot renew');
  t.equal((await login(user, pass)).status, 200, 'the password still can');
});
