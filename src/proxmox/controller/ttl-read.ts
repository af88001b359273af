// A view read from the Proxmox API and reused for a while (the VM list, the storage rows): one
// read in flight at a time, which callers in the meantime share, and its result kept for ttlMs.
export class TtlRead<T> {
  private cached: { at: number; value: T } | undefined;
  private inflight: Promise<T> | undefined;

  constructor(
    private readonly read: (signal?: AbortSignal) => Promise<T>,
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** The kept value while fresh (unless `fresh`), else the read in flight, else a new read. */
  get(signal?: AbortSignal, fresh = false): Promise<T> {
    if (!fresh && this.cached && this.now() - this.cached.at < this.ttlMs) return Promise.resolve(this.cached.value);
    if (this.inflight) return this.inflight;
    const p = this.read(signal)
      .then((value) => {
        this.cached = { at: this.now(), value };
        return value;
      })
      .finally(() => {
        if (this.inflight === p) this.inflight = undefined;
      });
    this.inflight = p;
    return p;
  }

  invalidate(): void {
    this.cached = undefined;
  }
}
