// A view read from the Proxmox API and reused for a while (the VM list, the storage rows): one
// read in flight at a time, which callers in the meantime share (src/single-flight.ts: a caller
// that gives up does not cancel it for the others), and its result kept for ttlMs from when the
// read was sent.
//
// Refresh-ahead: a caller that finds the kept value past half its TTL gets it at once, and a
// read starts in the background, so a view in steady use is replaced before it expires and no
// request waits for it (docs/performance.md, which reads are fresh and which are cached). What a
// caller is served is never older than the TTL, as before; only an expired (or `fresh`) view
// is read while the caller waits.
import { SingleFlight } from '../../../single-flight.js';

/** The part of the TTL after which a use of the kept value starts a background read. */
export const REFRESH_AHEAD = 0.5;

export class TtlRead<T> {
  private cached: { at: number; value: T } | undefined;
  private readonly flight: SingleFlight<null, T>;
  /** Counts invalidations: a read sent before one is returned to its callers but not kept. */
  private generation = 0;

  constructor(
    /** The read, for the error of a caller that gives up waiting, e.g. "Proxmox pve1: list VMs". */
    what: string,
    private readonly read: (signal?: AbortSignal) => Promise<T>,
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.flight = new SingleFlight(() => what);
  }

  /** The kept value while fresh (unless `fresh`), else the read in flight, else a new read. */
  get(signal?: AbortSignal, fresh = false): Promise<T> {
    const c = this.cached;
    if (!fresh && c) {
      const age = this.now() - c.at;
      if (age < this.ttlMs) {
        if (age >= this.ttlMs * REFRESH_AHEAD && this.flight.size === 0) {
          // Nobody waits for it: a failure leaves the kept value to expire, and the next caller
          // after that reads (and sees the error) itself.
          this.start(undefined, false).catch(() => undefined);
        }
        return Promise.resolve(c.value);
      }
    }
    // A fresh read never joins one sent before the caller asked (a refresh-ahead, say).
    return this.start(signal, fresh);
  }

  private start(signal: AbortSignal | undefined, fresh: boolean): Promise<T> {
    return this.flight.run(
      null,
      async (shared) => {
        const at = this.now();
        const gen = this.generation;
        const value = await this.read(shared);
        // An older read landing late never replaces a newer one.
        if (gen === this.generation && (!this.cached || this.cached.at <= at)) this.cached = { at, value };
        return value;
      },
      signal,
      fresh,
    );
  }

  invalidate(): void {
    this.generation++;
    this.cached = undefined;
  }
}
