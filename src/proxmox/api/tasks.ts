// Waiting: for Proxmox tasks to finish, between retries of a busy VM, for a state to appear.
import { DeadlineExceeded, isCsiError } from '../../errors.js';
import type { ProxmoxReadApi } from './api.js';
import { taskError } from './errors.js';

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (!signal) return new Promise((resolve) => setTimeout(resolve, ms));
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(aborted(signal));
      return;
    }
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(aborted(signal));
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function aborted(signal: AbortSignal): Error {
  const reason = signal.reason instanceof Error ? signal.reason.message : 'cancelled';
  return new DeadlineExceeded(`gave up waiting: ${reason}`);
}

/** The node a task runs on, from its UPID (`UPID:node:pid:pstart:starttime:type:id:user:`). */
export function upidNode(upid: string): string | undefined {
  const parts = upid.split(':');
  return parts[0] === 'UPID' && parts[1] ? parts[1] : undefined;
}

export interface WaitOptions {
  cluster: string;
  what: string;
  signal?: AbortSignal | undefined;
  timeoutMs?: number | undefined;
}

/** Polls a task until it stops; an exit status other than OK is an error (typed by its text). */
export async function waitTask(api: ProxmoxReadApi, fallbackNode: string, upid: string, o: WaitOptions): Promise<void> {
  const node = upidNode(upid) ?? fallbackNode;
  const deadline = Date.now() + (o.timeoutMs ?? 120_000);
  let delay = 10;
  for (;;) {
    const st = await api.taskStatus(node, upid, { signal: o.signal });
    if (st.status === 'stopped') {
      const exit = st.exitstatus ?? '';
      if (exit === 'OK' || /^WARNINGS?: \d+$/.test(exit)) return;
      throw taskError(exit || 'unknown error', { cluster: o.cluster, what: o.what });
    }
    if (Date.now() + delay > deadline) {
      throw new DeadlineExceeded(
        `Proxmox ${o.cluster}: ${o.what}: task ${upid} still running after ${o.timeoutMs ?? 120_000} ms`,
      );
    }
    await sleep(delay, o.signal);
    delay = Math.min(delay * 2, 500);
  }
}

export interface BackoffOptions {
  signal?: AbortSignal | undefined;
  attempts?: number | undefined;
  baseMs?: number | undefined;
  maxMs?: number | undefined;
  onRetry?: ((err: unknown, attempt: number, delayMs: number) => void) | undefined;
}

/** Delay before retry `attempt` (1-based): exponential with full jitter, capped. */
export function backoffDelay(attempt: number, baseMs = 200, maxMs = 3_000): number {
  const cap = Math.min(maxMs, baseMs * 2 ** (attempt - 1));
  return Math.round(cap / 2 + Math.random() * (cap / 2));
}

/** Runs fn again while it fails with Busy (a Proxmox lock timeout, a locked or changed VM). */
export async function retryBusy<T>(fn: (attempt: number) => Promise<T>, o: BackoffOptions = {}): Promise<T> {
  const attempts = o.attempts ?? 6;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (e) {
      if (!isCsiError(e, 'Aborted') || attempt >= attempts || o.signal?.aborted) throw e;
      const delay = backoffDelay(attempt, o.baseMs, o.maxMs);
      o.onRetry?.(e, attempt, delay);
      await sleep(delay, o.signal);
    }
  }
}
