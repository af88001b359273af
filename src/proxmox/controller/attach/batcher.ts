// A per-key batcher (the shape of aws-ebs-csi-driver's pkg/batcher): items for one key that
// arrive while that key's previous batch runs are handed to the runner together; one batch per
// key at a time, keys independent. It knows nothing about what the items are: the attach queue
// uses it with one key per VM, so every publish that arrives for a VM during a config change
// goes into the next single change.
//
// No fixed wait for company: an idle key's first item starts a batch at once, and the runner
// may take items that arrived since (takeLate) up to the moment it decides what to send. The
// attach queue does that after its read of the VM's config, so the read (one Proxmox round
// trip) is the merge window, and a lone publish waits for nothing.
import { sleep } from '../../api/tasks.js';

export interface BatcherOptions {
  /** How long a key waits for company before each batch; default 0 (see takeLate). */
  windowMs?: number;
}

export class Batcher<K, T> {
  private readonly queues = new Map<K, T[]>();

  constructor(
    private readonly run: (key: K, items: T[]) => Promise<void>,
    private readonly o: BatcherOptions = {},
  ) {}

  /** Queues an item; starts the key's drain when it is idle. */
  add(key: K, item: T): void {
    const q = this.queues.get(key);
    if (q) {
      q.push(item);
      return;
    }
    this.queues.set(key, [item]);
    void this.drain(key);
  }

  /** Takes an item out again if no batch has taken it yet; true when it was removed. */
  remove(key: K, item: T): boolean {
    const q = this.queues.get(key);
    const i = q?.indexOf(item) ?? -1;
    if (!q || i < 0) return false;
    q.splice(i, 1);
    return true;
  }

  /**
   * For the runner of the key's current batch: the items queued since it started, when every
   * one of them passes `fits` (else none, so items keep their order across batches).
   */
  takeLate(key: K, fits: (item: T) => boolean): T[] {
    const q = this.queues.get(key);
    if (!q || q.length === 0 || !q.every(fits)) return [];
    return q.splice(0);
  }

  /** Whether the key has a batch running or items waiting. */
  has(key: K): boolean {
    return this.queues.has(key);
  }

  private async drain(key: K): Promise<void> {
    const q = this.queues.get(key);
    if (!q) return;
    try {
      // Items added in the same turn of the event loop start together.
      await Promise.resolve();
      while (q.length > 0) {
        if (this.o.windowMs) await sleep(this.o.windowMs);
        const items = q.splice(0);
        if (items.length === 0) continue;
        // The runner owns its items' outcomes; a throw here must not stop the key's queue.
        await this.run(key, items).catch(() => undefined);
      }
    } finally {
      this.queues.delete(key);
    }
  }
}
