// Each storage's usage per host, as the thin-pool guard (safety/pool-guard.ts) and the pool
// metrics read it: GET /nodes/{node}/storage/{storage}/status (size, and `used`, which for
// lvmthin is the thin pool's data usage: pve-storage's LvmThinPlugin status() reports lv_size and
// data_percent × lv_size of the pool), and the storage's content list (every volume's virtual
// size; this driver's are the ones its owner VMID has). Both are reused for the cluster's cache
// TTL, so a CreateVolume on warm caches costs no extra call; the content list is the cluster's
// content view (content-cache.ts), which this process's own allocations and frees keep current.
// Sizes of allocations still in flight are reserved, so parallel creates cannot together pass
// the over-commit limit that each alone keeps.
import type { ProxmoxReadApi, StorageStatus } from '../../api/api.js';
import type { PoolFigures } from '../safety/pool-guard.js';
import type { ContentCache } from './content-cache.js';
import { TtlRead } from './ttl-read.js';

export class PoolUsage {
  private readonly status = new Map<string, TtlRead<StorageStatus>>();
  private readonly reserved = new Map<string, number>();

  constructor(
    private readonly region: string,
    private readonly api: ProxmoxReadApi,
    private readonly content: ContentCache,
    private readonly controllerVmId: number,
    private readonly ttlMs: number,
  ) {}

  private key(node: string, storage: string): string {
    return `${node}\u0000${storage}`;
  }

  /**
   * The pool's figures; `fresh` reads both now, 'status' only the storage status (what guests
   * wrote moves `used` faster than any TTL; the content list is kept current by this process's
   * own allocations and frees). `known`: a status the caller read just now (GetCapacity reads it
   * anyway), used instead of the kept one.
   */
  async figures(
    node: string,
    storage: string,
    signal?: AbortSignal,
    fresh: boolean | 'status' = false,
    known?: Pick<StorageStatus, 'total' | 'used' | 'active'>,
  ): Promise<PoolFigures> {
    const k = this.key(node, storage);
    let read = this.status.get(k);
    if (!read) {
      read = new TtlRead(
        `Proxmox ${this.region}: status of storage ${storage} on ${node}`,
        (s) => this.api.storageStatus(node, storage, { signal: s }),
        this.ttlMs,
      );
      this.status.set(k, read);
    }
    const [st, items] = await Promise.all([
      known ?? read.get(signal, fresh !== false),
      this.content.list(node, storage, undefined, signal, fresh === true),
    ]);
    let all = this.reserved.get(k) ?? 0;
    let ours = all;
    for (const i of items) {
      all += i.size;
      if (i.vmid === this.controllerVmId) ours += i.size;
    }
    return {
      region: this.region,
      node,
      storage,
      size: st.active ? st.total : 0,
      used: st.used,
      provisionedAll: all,
      provisionedOurs: ours,
    };
  }

  /** Counts `bytes` as provisioned until the returned function is called (the allocation ended). */
  reserve(node: string, storage: string, bytes: number): () => void {
    const k = this.key(node, storage);
    this.reserved.set(k, (this.reserved.get(k) ?? 0) + bytes);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.reserved.get(k) ?? 0) - bytes;
      if (left > 0) this.reserved.set(k, left);
      else this.reserved.delete(k);
    };
  }
}
