// Every API request, for the admin endpoint: a bounded log and per-route counters. Benchmarks read
// the counters to count Proxmox calls per CSI operation.

export interface RequestLogEntry {
  seq: number;
  time: string;
  method: string;
  path: string;
  /** Route key such as `PUT /nodes/{node}/qemu/{vmid}/config`, or `METHOD (unmatched)`. */
  route: string;
  /** HTTP status sent; 0 when the connection was dropped instead. */
  status: number;
  durationMs: number;
  tokenId?: string;
  /** Fault applied to this request, if any. */
  fault?: 'error' | 'drop-before' | 'drop-after';
  /** Request parameters (query and body), for debugging what a driver sent. */
  params?: Record<string, string>;
}

export interface Counters {
  total: number;
  byRoute: Record<string, number>;
  /** Answers with status >= 400 or dropped, per route. */
  errorsByRoute: Record<string, number>;
}

export class RequestLog {
  private entries: RequestLogEntry[] = [];
  private seq = 0;
  private counters: Counters = { total: 0, byRoute: {}, errorsByRoute: {} };

  constructor(private readonly capacity = 10_000) {}

  record(e: Omit<RequestLogEntry, 'seq' | 'time'>): void {
    const entry: RequestLogEntry = { seq: ++this.seq, time: new Date().toISOString(), ...e };
    this.entries.push(entry);
    if (this.entries.length > this.capacity) this.entries.splice(0, this.entries.length - this.capacity);
    this.counters.total++;
    this.counters.byRoute[e.route] = (this.counters.byRoute[e.route] ?? 0) + 1;
    if (e.status === 0 || e.status >= 400) {
      this.counters.errorsByRoute[e.route] = (this.counters.errorsByRoute[e.route] ?? 0) + 1;
    }
  }

  /** Entries with seq > since, oldest first, at most `limit`. */
  list(since = 0, limit = this.capacity): RequestLogEntry[] {
    return this.entries.filter((e) => e.seq > since).slice(0, limit);
  }

  getCounters(): Counters {
    return structuredClone(this.counters);
  }

  lastSeq(): number {
    return this.seq;
  }

  reset(): void {
    this.entries = [];
    this.counters = { total: 0, byRoute: {}, errorsByRoute: {} };
  }
}
