// Ticket login for a `username`/`password` cluster, as upstream allows (go-proxmox's
// credentials): `POST /access/ticket` gives a ticket (sent as the `PVEAuthCookie` cookie) and a
// `CSRFPreventionToken` (a header on every write). PVE tickets live 2 hours; we renew well
// before that, with the current ticket as the password (what PVE's own UI does), falling back to
// the password when the ticket is refused. A request answered 401 "invalid PVE ticket" drops the
// ticket so the next login starts fresh (the proxmox-api engine re-sends such a request once:
// safe, since PVE rejected it before running it).
import { ProxmoxEngine } from 'proxmox-api';
import { FailedPrecondition, Unavailable } from '../../errors.js';
import { TRANSPORT_MARK } from './package-errors.js';
import type { FetchLike } from './transport.js';
import { SingleFlight } from '../../single-flight.js';

/** PVE::AccessControl's `$ticket_lifetime`. */
export const PVE_TICKET_LIFETIME_MS = 2 * 3600_000;
/** Renew at half the lifetime: a stalled hour or clock skew still leaves a valid ticket. */
export const DEFAULT_TICKET_RENEW_AFTER_MS = 3600_000;

export interface Ticket {
  ticket: string;
  CSRFPreventionToken: string;
}

export interface TicketSessionOptions {
  /** `https://HOST:PORT/api2/json` */
  apiBase: string;
  username: string;
  password: string;
  /** Cluster (region) name, for messages. */
  region: string;
  fetch: FetchLike;
  renewAfterMs?: number;
  now?: () => number;
}

export class TicketSession {
  private current: (Ticket & { at: number }) | undefined;
  /** Concurrent requests needing a ticket share one login. */
  private readonly login1: SingleFlight<null, Ticket>;
  private readonly renewAfterMs: number;
  private readonly now: () => number;
  /** Logins done, by kind; for tests and metrics. */
  readonly logins = { password: 0, renewal: 0 };

  constructor(private readonly o: TicketSessionOptions) {
    this.renewAfterMs = o.renewAfterMs ?? DEFAULT_TICKET_RENEW_AFTER_MS;
    this.now = o.now ?? Date.now;
    this.login1 = new SingleFlight(() => `Proxmox ${o.region}: login as ${o.username}`);
  }

  async get(): Promise<Ticket> {
    const c = this.current;
    if (c && this.now() - c.at < this.renewAfterMs) return c;
    return this.login1.run(null, () => this.login());
  }

  /** Forget a ticket PVE refused (only if it is still the current one). */
  invalidate(ticket: string): void {
    if (this.current?.ticket === ticket) this.current = undefined;
  }

  private async login(): Promise<Ticket> {
    const old = this.current;
    if (old && this.now() - old.at < PVE_TICKET_LIFETIME_MS - 60_000) {
      const renewed = await this.post(old.ticket).catch(() => undefined);
      if (renewed) {
        this.logins.renewal++;
        return this.keep(renewed);
      }
    }
    const fresh = await this.post(this.o.password, true);
    // post() with explain = true throws instead of answering undefined
    if (!fresh) throw new Unavailable(`Proxmox ${this.o.region}: login as ${this.o.username}: no ticket`);
    this.logins.password++;
    return this.keep(fresh);
  }

  private keep(t: Ticket): Ticket {
    this.current = { ...t, at: this.now() };
    return t;
  }

  private async post(password: string, explain = false): Promise<Ticket | undefined> {
    const where = `Proxmox ${this.o.region}: login as ${this.o.username}`;
    const body = new URLSearchParams({ username: this.o.username, password }).toString();
    const res = await this.o.fetch(`${this.o.apiBase}/access/ticket`, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/x-www-form-urlencoded',
        'Content-Length': String(Buffer.byteLength(body)),
      },
      body,
    });
    const text = await res.text();
    if (res.status === 200) {
      let data: Partial<Ticket> | undefined;
      try {
        data = (JSON.parse(text) as { data?: Partial<Ticket> }).data;
      } catch (e) {
        // A proxy's page or a cut-off answer: the parser's error is the cause the log shows.
        throw new Unavailable(`${where}: the answer is not JSON: ${(e as Error).message}`, { cause: e });
      }
      if (data?.ticket && data.CSRFPreventionToken)
        return { ticket: data.ticket, CSRFPreventionToken: data.CSRFPreventionToken };
      throw new Unavailable(`${where}: the answer carries no ticket`);
    }
    if (!explain) return undefined;
    if (res.statusText.startsWith(TRANSPORT_MARK)) {
      throw new Unavailable(`${where}: cannot reach the API: ${res.statusText.slice(TRANSPORT_MARK.length).trim()}`);
    }
    if (res.status === 401) {
      throw new FailedPrecondition(
        `${where} failed (${res.statusText}); check username and password in the config (the user needs the realm, e.g. root@pam)`,
      );
    }
    throw new Unavailable(`${where}: HTTP ${res.status} ${res.statusText}`);
  }
}

/** The proxmox-api engine with its ticket handling replaced by a TicketSession. */
export class TicketEngine extends ProxmoxEngine {
  private handed?: string;

  constructor(
    options: ConstructorParameters<typeof ProxmoxEngine>[0],
    private readonly session: TicketSession,
  ) {
    super(options);
  }

  override async getTicket(): Promise<Ticket> {
    // The engine clears `ticket` after a 401 "invalid PVE ticket": the session must not reuse it.
    if (this.ticket === undefined && this.handed) this.session.invalidate(this.handed);
    const t = await this.session.get();
    this.ticket = t.ticket;
    this.CSRFPreventionToken = t.CSRFPreventionToken;
    this.handed = t.ticket;
    return t;
  }
}
