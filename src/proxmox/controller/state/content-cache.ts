// The driver's own disks per storage and host (GET …/storage/{storage}/content?vmid=<owner>),
// kept for the cache TTL and corrected by this process's own allocations and frees, so that a
// publish or delete does not list the storage again to learn that the disk exists and which
// VolumeAttributesClass markers (mutable.ts) sit beside it. A miss is never trusted: a disk not
// in the cached list is looked up again before anything answers NotFound or "already gone".
// What another instance allocated or freed within the TTL is not seen (a marker it wrote is
// applied at the next publish after the TTL).
//
// Refresh-ahead as in ttl-read.ts: a list past half its TTL is served and re-read in the
// background. A read that was sent before one of this process's own allocations or frees (a
// refresh-ahead, or any read that was in flight) is corrected by them when it lands: a freed
// disk never comes back from it, an allocated one never drops out, and a list invalidated since
// it was sent is not kept.
import type { ProxmoxReadApi, StorageContentItem } from '../../api/api.js';
import { SingleFlight } from '../../../single-flight.js';
import { REFRESH_AHEAD } from './ttl-read.js';

/** How long this process's own frees are remembered against reads sent before them (> any query timeout). */
const GONE_KEEP_MS = 60_000;

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
  /** Volumes this process freed, by node and volid, with when. */
  private readonly gone = new Map<string, number>();
  /** Invalidations per node and storage: a list read sent before one is not kept. */
  private readonly generations = new Map<string, number>();
  /** Keys with a background read in flight. */
  private readonly ahead = new Set<string>();
  /** Background reads started (tests count them). */
  refreshes = 0;

  constructor(
    private readonly api: ProxmoxReadApi,
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
    if (!fresh && hit) {
      const age = Date.now() - hit.at;
      if (age < this.ttlMs) {
        if (age >= this.ttlMs * REFRESH_AHEAD && !this.ahead.has(k)) {
          this.refreshes++;
          this.ahead.add(k);
          // Nobody waits for it; a failure leaves the kept list to expire.
          this.read(k, node, storage, owner, undefined, false)
            .finally(() => this.ahead.delete(k))
            .catch(() => undefined);
        }
        return hit.items;
      }
    }
    return this.read(k, node, storage, owner, signal, fresh);
  }

  private read(
    k: string,
    node: string,
    storage: string,
    owner: number | undefined,
    signal: AbortSignal | undefined,
    fresh: boolean,
  ): Promise<StorageContentItem[]> {
    return this.inflight.run(
      k,
      async (shared) => {
        const at = Date.now();
        const gen = this.generations.get(this.nodeKey(node, storage)) ?? 0;
        const listed = await this.api.listContent(node, storage, owner, { signal: shared });
        const items = this.reconcile(node, storage, owner, listed, at);
        const cur = this.lists.get(k);
        const kept = gen === (this.generations.get(this.nodeKey(node, storage)) ?? 0);
        if (kept && (!cur || cur.at <= at)) this.lists.set(k, { at, items });
        return items;
      },
      signal,
      fresh,
    );
  }

  private nodeKey(node: string, storage: string): string {
    return `${node}\u0000${storage}`;
  }

  /** A list read sent at `at`, with this process's allocations and frees since applied. */
  private reconcile(
    node: string,
    storage: string,
    owner: number | undefined,
    listed: StorageContentItem[],
    at: number,
  ): StorageContentItem[] {
    const prefix = `${node}\u0000`;
    const freedSince = (volid: string) => (this.gone.get(prefix + volid) ?? -Infinity) >= at;
    let items = listed.some((i) => freedSince(i.volid)) ? listed.filter((i) => !freedSince(i.volid)) : listed;
    for (const [k, m] of this.made) {
      if (m.at < at || !k.startsWith(prefix) || !m.item.volid.startsWith(`${storage}:`)) continue;
      if (owner !== undefined && m.item.vmid !== owner) continue;
      if (!items.some((i) => i.volid === m.item.volid)) items = [...items, m.item];
    }
    return items;
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
    this.gone.delete(`${node}\u0000${item.volid}`);
    for (const o of [owner, undefined]) {
      const l = this.lists.get(this.key(node, storage, o));
      if (l && !l.items.some((i) => i.volid === item.volid)) l.items = [...l.items, item];
    }
  }

  /** This process freed the volume. */
  removed(node: string, storage: string, volid: string): void {
    const now = Date.now();
    this.made.delete(`${node}\u0000${volid}`);
    if (this.gone.size > 256) for (const [k, at] of this.gone) if (now - at >= GONE_KEEP_MS) this.gone.delete(k);
    this.gone.set(`${node}\u0000${volid}`, now);
    for (const [k, l] of this.lists) {
      if (k.startsWith(`${node}\u0000${storage}\u0000`)) l.items = l.items.filter((i) => i.volid !== volid);
    }
  }

  invalidate(node: string, storage: string): void {
    const nk = this.nodeKey(node, storage);
    this.generations.set(nk, (this.generations.get(nk) ?? 0) + 1);
    for (const k of [...this.made.keys()]) if (k.startsWith(`${node}\u0000${storage}:`)) this.made.delete(k);
    for (const k of [...this.lists.keys()]) if (k.startsWith(`${node}\u0000${storage}\u0000`)) this.lists.delete(k);
  }
}
