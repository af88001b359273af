// A timeout as an AbortSignal that is disarmed when the work it bounds is done.
// AbortSignal.timeout() cannot be disarmed: its timer stays armed until it fires, and the timer
// holds the async context it was created in (Node 24 keeps AsyncLocalStorage in each timer's
// async context frame). A request's context is its gRPC call, so every Proxmox request kept its
// whole call (request, HTTP/2 stream, cancellation, reply) reachable for the 30 s of its query
// timeout: under load that was every call of the last 30 s (bench/rss.ts, heap snapshots).

/** A signal that aborts with a TimeoutError after `ms`; `clear()` disarms it once the work ends. */
export function timeoutSignal(ms: number): { signal: AbortSignal; clear: () => void } {
  const ac = new AbortController();
  const timer = setTimeout(() => {
    ac.abort(new DOMException(`timed out after ${ms} ms`, 'TimeoutError'));
  }, ms).unref();
  return { signal: ac.signal, clear: () => clearTimeout(timer) };
}
