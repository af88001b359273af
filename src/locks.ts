// The one concurrency primitive of the program: per-key locks on async-lock. Two ways to take
// them: `run` waits its turn (the node halves serialise the calls for one volume, the Proxmox
// controller the changes to one disk), `tryRun` refuses at once with Busy (the gRPC server's
// "operation pending for volume", answered ABORTED; the sidecars retry).
import AsyncLock from 'async-lock';
import { Busy } from './errors.js';

export class KeyedLock {
  // maxPending: no cap on waiters (async-lock refuses the 1001st by default); every waiter is a
  // call the CO made and bounds by its own deadline.
  private readonly lock = new AsyncLock({ maxPending: Infinity });

  /** Runs fn holding every key, after the calls already holding or waiting for them. */
  run<T>(keys: string | readonly string[], fn: () => Promise<T>): Promise<T> {
    // Sorted: two calls taking overlapping key sets in different orders cannot deadlock.
    const unique = typeof keys === 'string' ? [keys] : [...new Set(keys)].sort();
    // A zero-argument wrapper: async-lock treats a one-argument function as callback style.
    return this.lock.acquire(unique, () => fn());
  }

  /**
   * Runs fn holding every key, or throws Busy at once when one is held. Taking free keys is
   * synchronous in async-lock, so no other call can slip in between the check and the take.
   */
  tryRun<T>(keys: readonly string[], fn: () => Promise<T>): Promise<T> {
    const unique = [...new Set(keys.filter((k) => k !== ''))];
    const busy = unique.find((k) => this.lock.isBusy(k));
    if (busy !== undefined)
      return Promise.reject(new Busy(`an operation on ${busy} is already in progress; retry later`));
    return unique.length === 0 ? fn() : this.run(unique, fn);
  }

  /** Whether any call holds or waits for `key` (any key when omitted). */
  busy(key?: string): boolean {
    return this.lock.isBusy(key);
  }
}
