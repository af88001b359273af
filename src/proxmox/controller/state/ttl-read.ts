// A view read from the Proxmox API and reused for a while (the VM list, the storage rows): one
// read in flight at a time, which callers in the meantime share (src/single-flight.ts: a caller
// that gives up does not cancel it for the others), and its result kept for ttlMs.
import { SingleFlight } from '../../../single-flight.js';

export class TtlRead<T> {
  private cached: { at: number; value: T } | undefined;
  private readonly flight: SingleFlight<null, T>;

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
    if (!fresh && this.cached && this.now() - this.cached.at < this.ttlMs) return Promise.resolve(this.cached.value);
    return this.flight.run(
      null,
      async (shared) => {
        const value = await this.read(shared);
        this.cached = { at: this.now(), value };
        return value;
      },
      signal,
    );
  }

  invalidate(): void {
    this.cached = undefined;
  }
}
