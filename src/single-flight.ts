// Callers that ask for the same thing while it is being fetched share one request (a Proxmox
// ticket login, the cluster's VM list, a storage's content): the one primitive for it, used by
// the API client and the controller alike. Its rules:
// - a failure is not kept: the next caller after it starts a new request;
// - one caller's cancellation ends only its own wait, with DeadlineExceeded; the shared request
//   runs on for the others, and is aborted only when every caller that shares it has left
//   (a caller without a signal never leaves);
// - nothing is kept after a request settles (keeping a result is the caller's cache).
import { type CsiError, DeadlineExceeded } from './errors.js';

interface Flight<T> {
  promise: Promise<T>;
  /** Aborts the shared request: only when its last waiter left. */
  ac: AbortController;
  waiters: number;
}

export class SingleFlight<K, T> {
  private readonly running = new Map<K, Flight<T>>();

  /** `what` names the request in a leaving caller's error, e.g. "Proxmox pve1: login". */
  constructor(private readonly what: (key: K) => string) {}

  /**
   * Joins the request running for `key`, or starts one with `start`. `fresh` starts a new one
   * even while another runs (its result may predate what the caller knows); later callers join
   * the newer one.
   */
  run(key: K, start: (signal: AbortSignal) => Promise<T>, signal?: AbortSignal, fresh = false): Promise<T> {
    if (signal?.aborted) return Promise.reject(this.left(key, signal));
    let f = fresh ? undefined : this.running.get(key);
    if (!f) {
      const ac = new AbortController();
      const flight: Flight<T> = { promise: Promise.resolve().then(() => start(ac.signal)), ac, waiters: 0 };
      this.running.set(key, flight);
      flight.promise
        .finally(() => {
          this.forget(key, flight);
        })
        .catch(() => undefined); // each waiter sees the failure; this chain only cleans up
      f = flight;
    }
    return this.wait(key, f, signal);
  }

  /** Requests in flight, for tests. */
  get size(): number {
    return this.running.size;
  }

  private wait(key: K, f: Flight<T>, signal: AbortSignal | undefined): Promise<T> {
    f.waiters++;
    if (!signal) return f.promise;
    return new Promise<T>((resolve, reject) => {
      const leave = () => {
        reject(this.left(key, signal));
        if (--f.waiters === 0) {
          this.forget(key, f);
          f.ac.abort(signal.reason);
        }
      };
      signal.addEventListener('abort', leave, { once: true });
      f.promise
        .then(resolve, reject)
        .finally(() => {
          signal.removeEventListener('abort', leave);
        })
        .catch(() => undefined);
    });
  }

  private forget(key: K, f: Flight<T>): void {
    if (this.running.get(key) === f) this.running.delete(key);
  }

  private left(key: K, signal: AbortSignal): CsiError {
    const why = signal.reason instanceof Error ? `: ${signal.reason.message}` : '';
    return new DeadlineExceeded(`${this.what(key)}: cancelled while waiting for the answer${why}`, {
      cause: signal.reason,
    });
  }
}
