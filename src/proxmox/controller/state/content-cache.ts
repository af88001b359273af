// The driver's own disks per storage and host (GET …/storage/{storage}/content?vmid=<owner>),
// kept for the cache TTL and corrected by this process's own allocations and frees, so that a
// publish or delete does not list the storage again to learn that the disk exists and which
// VolumeAttributesClass markers (mutable.ts) sit beside it. A miss is never trusted: a disk not
// in the cached list is looked up again before anything answers NotFound or "already gone".
// What another instance allocated or freed within the TTL is not seen (a marker it wrote is
// applied at the next publish after the TTL).
import type { ProxmoxApi, StorageContentItem } from '../../api/api.js';
import { SingleFlight } from '../../../single-flight.js';

interface Listing {
  at: number;
  items: StorageContentItem[];
}

export class ContentCache {
  private readonly lists = new Map<string, Listing>();
  /** One list per key in flight, shared by the callers meanwhile (a fresh read starts a newer one). */
  private readonly inflight = new SingleFlight<string, StorageContentItem[]>((k) => {
    const [node = '', storage = ''] = k.split('\u0000');
    return `Proxmox: list the content of storage ${storage} on ${node}`;
  });
  /** Volumes this process allocated, by node and volid (a list may not have been read yet). */
  private readonly made = new Map<string, { item: StorageContentItem; at: number }>();

  constructor(
    private readonly api: ProxmoxApi,
    private readonly ttlMs: number,
  ) {}

  private key(node: string, storage: string, owner: number | undefined): string {
    return `${node}\u0000${storage}\u0000${owner ?? ''}`;
  }

  /** The owner's disks on the storage of that node; `fresh` reads them now. */
  async list(
    node: string,
    storage: string,
    owner: number | undefined,
    signal?: AbortSignal,
    fresh = false,
  ): Promise<StorageContentItem[]> {
    const k = this.key(node, storage, owner);
    const hit = this.lists.get(k);
    if (!fresh && hit && Date.now() - hit.at < this.ttlMs) return hit.items;
    return this.inflight.run(
      k,
      async (shared) => {
        const at = Date.now();
        const items = await this.api.listContent(node, storage, owner, { signal: shared });
        const cur = this.lists.get(k);
        if (!cur || cur.at <= at) this.lists.set(k, { at, items });
        return items;
      },
      signal,
      fresh,
    );
  }

  /** The volume's row if a list within its TTL or this process's own allocation has it; never reads. */
  peek(node: string, storage: string, owner: number | undefined, volid: string): StorageContentItem | undefined {
    const hit = this.lists.get(this.key(node, storage, owner));
    const listed = hit && Date.now() - hit.at < this.ttlMs ? hit.items.find((i) => i.volid === volid) : undefined;
    const made = this.made.get(`${node}\u0000${volid}`);
    return listed ?? (made && Date.now() - made.at < this.ttlMs ? made.item : undefined);
  }

  /** The disk's row: from the cached list, or, when it is not there, from a fresh read. */
  async find(
    node: string,
    storage: string,
    owner: number | undefined,
    volid: string,
    signal?: AbortSignal,
  ): Promise<{ item?: StorageContentItem; items: StorageContentItem[] }> {
    let items = await this.list(node, storage, owner, signal);
    let item = items.find((i) => i.volid === volid);
    if (!item) {
      items = await this.list(node, storage, owner, signal, true);
      item = items.find((i) => i.volid === volid);
    }
    return item ? { item, items } : { items };
  }

  /** This process allocated the volume (or found it). */
  added(node: string, storage: string, owner: number | undefined, item: StorageContentItem): void {
    const now = Date.now();
    if (this.made.size > 256) for (const [k, m] of this.made) if (now - m.at >= this.ttlMs) this.made.delete(k);
    this.made.set(`${node}\u0000${item.volid}`, { item, at: now });
    for (const o of [owner, undefined]) {
      const l = this.lists.get(this.key(node, storage, o));
      if (l && !l.items.some((i) => i.volid === item.volid)) l.items = [...l.items, item];
    }
  }

  /** This process freed the volume. */
  removed(node: string, storage: string, volid: string): void {
    this.made.delete(`${node}\u0000${volid}`);
    for (const [k, l] of this.lists) {
      if (k.startsWith(`${node}\u0000${storage}\u0000`)) l.items = l.items.filter((i) => i.volid !== volid);
    }
  }

  invalidate(node: string, storage: string): void {
    for (const k of [...this.made.keys()]) if (k.startsWith(`${node}\u0000${storage}:`)) this.made.delete(k);
    for (const k of [...this.lists.keys()]) if (k.startsWith(`${node}\u0000${storage}\u0000`)) this.lists.delete(k);
  }
}
