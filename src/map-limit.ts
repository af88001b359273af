// The one bounded-concurrency map of the program: reads fanned out over Proxmox VMs or NFS
// directories run at most `limit` at a time, so a large cluster or share is not hit by
// thousands of calls at once.

/** fn over items, at most `limit` at a time, results in the items' order. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (t: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  // One iterator shared by the workers: each takes the next item when it is free.
  const queue = items.entries();
  const worker = async () => {
    for (const [i, item] of queue) out[i] = await fn(item);
  };
  await Promise.all(Array.from({ length: Math.max(0, Math.min(limit, items.length)) }, worker));
  return out;
}
