// flock-like keyed locks: one holder per lock file, waiters queue and give up after a timeout with
// the exact message PVE::Tools::lock_file produces.

export class LockTimeoutError extends Error {}

interface Waiter {
  grant: () => void;
  fail: (e: Error) => void;
  timer: NodeJS.Timeout;
}

export class KeyedLocks {
  private held = new Set<string>();
  private waiters = new Map<string, Waiter[]>();

  /**
   * Acquires the lock `key`; resolves to a release function, rejects with LockTimeoutError naming
   * `file` (the lock file PVE would flock).
   */
  acquire(key: string, file: string, timeoutMs: number): Promise<() => void> {
    const release = () => this.release(key);
    if (!this.held.has(key)) {
      this.held.add(key);
      return Promise.resolve(once(release));
    }
    return new Promise((resolve, reject) => {
      const queue = this.waiters.get(key) ?? [];
      const waiter: Waiter = {
        grant: () => {
          clearTimeout(waiter.timer);
          resolve(once(release));
        },
        fail: reject,
        timer: setTimeout(() => {
          const q = this.waiters.get(key) ?? [];
          const i = q.indexOf(waiter);
          if (i >= 0) q.splice(i, 1);
          reject(new LockTimeoutError(`can't lock file '${file}' - got timeout`));
        }, timeoutMs).unref(), // simulated time (see sleep)
      };
      queue.push(waiter);
      this.waiters.set(key, queue);
    });
  }

  async withLock<T>(
    key: string,
    file: string,
    timeoutMs: number,
    holdExtraMs: number,
    fn: () => Promise<T>,
  ): Promise<T> {
    const release = await this.acquire(key, file, timeoutMs);
    try {
      const result = await fn();
      if (holdExtraMs > 0) await sleep(holdExtraMs);
      return result;
    } finally {
      release();
    }
  }

  isHeld(key: string): boolean {
    return this.held.has(key);
  }

  /** Keys held right now (`node:/var/lock/…`), for the admin state dump. */
  heldKeys(): string[] {
    return [...this.held].sort();
  }

  private release(key: string): void {
    const queue = this.waiters.get(key);
    const next = queue?.shift();
    if (queue && queue.length === 0) this.waiters.delete(key);
    if (next) next.grant();
    else this.held.delete(key);
  }

  /** Rejects every waiter; used on shutdown so nothing hangs. */
  abortAll(): void {
    for (const [key, queue] of this.waiters) {
      for (const w of queue) {
        clearTimeout(w.timer);
        w.fail(new LockTimeoutError(`lock '${key}' aborted - simulator shutting down`));
      }
      this.waiters.delete(key);
    }
    this.held.clear();
  }
}

function once(fn: () => void): () => void {
  let done = false;
  return () => {
    if (!done) {
      done = true;
      fn();
    }
  };
}

/**
 * Simulated time (injected latency, task durations, a lock held longer): unref'd, so it never
 * keeps the process alive by itself. The API server's socket and its clients' connections do;
 * once the simulator is closed and its clients have gone, a request still "in" its latency must
 * not hold the process for the rest of it (a test would wait out a 60 s latency at exit).
 */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref());
}

/** Waits for `p` at most `ms`, without leaving a timer behind that keeps the process alive. */
export async function settleWithin(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

export const vmLockFile = (vmid: number) => `/var/lock/qemu-server/lock-${vmid}.conf`;
export const storageLockFile = (storage: string) => `/var/lock/pve-manager/pve-storage-${storage}`;
/** Lock files live on each host, so two hosts' `local-lvm` locks are different locks. */
export const lockKey = (node: string, file: string) => `${node}:${file}`;
