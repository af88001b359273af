// Everything the controller keeps per Proxmox cluster (region): its API, the VM locator, the
// per-VM attach queues, and a short-lived view of where each storage is available.
import type { Logger } from 'pino';
import type { ProxmoxApi, ProxmoxReadApi, StorageResource } from '../../api/api.js';
import { AttachQueues, type QueueOptions } from '../attach/attach-queue.js';
import { ContentCache } from './content-cache.js';
import { DiskIndex } from './disk-index.js';
import { Fences } from '../safety/fences.js';
import { StartupFence } from '../safety/startup-fence.js';
import { OwnershipPort } from '../safety/ownership-port.js';
import { TtlRead } from './ttl-read.js';
import { VmLocator } from './vm-locator.js';
import { KeyedLock } from '../../../locks.js';

export interface ClusterTuning {
  /** How long the VM list, the storage list, storage contents and other VMs' entries are reused; default 5 s. */
  cacheTtlMs?: number;
  queue?: Partial<Pick<QueueOptions, 'mergeWindowMs' | 'attempts' | 'confirmTimeoutMs' | 'taskTimeoutMs'>>;
  /** How long a change whose outcome is unknown keeps its volume fenced (fences.ts). */
  landHorizonMs?: number;
  /** How long after start exclusive publishes look for a previous process's changes (startup-fence.ts). */
  startupFenceMs?: number;
}

export class Cluster {
  readonly locator: VmLocator;
  readonly queues: AttachQueues;
  /** Volumes with a change in flight that may still land; shared by every mutating path. */
  readonly fences: Fences;
  /** After a restart: config changes a previous process sent that may still land. */
  readonly startup: StartupFence;
  /**
   * Reads only, by type: every mutating call goes through `port` with a permit of the ownership
   * gate (no-bypass.test.ts), the day-2 commands' included.
   */
  readonly api: ProxmoxReadApi;
  /** Every mutating Proxmox call of the controller, each with its permit (ownership.ts). */
  readonly port: OwnershipPort;
  /** Every VM's config entries as last read, and other instances' changes since (disk-index.ts). */
  readonly index: DiskIndex;
  /** The driver's own disks per storage and host (content-cache.ts). */
  readonly content: ContentCache;
  private readonly storageRowsRead: TtlRead<StorageResource[]>;
  /** How long cached views are reused (ClusterTuning.cacheTtlMs). */
  readonly ttlMs: number;
  private readonly volumeLocks = new KeyedLock();

  /** `identity`: the token id or user name this cluster's API runs as. */
  constructor(
    readonly region: string,
    api: ProxmoxApi,
    log: Logger,
    tuning: ClusterTuning = {},
    identity?: string,
  ) {
    this.startup = new StartupFence(api, {
      cluster: region,
      log,
      ...(identity !== undefined && { identity }),
      ...(tuning.startupFenceMs !== undefined && { windowMs: tuning.startupFenceMs }),
    });
    this.api = api;
    this.port = new OwnershipPort(api, (upid) => this.startup.noteOwn(upid));
    this.ttlMs = tuning.cacheTtlMs ?? 5_000;
    this.locator = new VmLocator(api, { cluster: region, ttlMs: this.ttlMs, log: log.child({ cluster: region }) });
    this.fences = new Fences(tuning.landHorizonMs);
    this.index = new DiskIndex(api, this.locator);
    this.content = new ContentCache(api, this.ttlMs);
    this.storageRowsRead = new TtlRead(
      `Proxmox ${region}: list storages`,
      (signal) => api.storageResources({ signal }),
      this.ttlMs,
    );
    this.queues = new AttachQueues({
      api,
      cluster: region,
      locator: this.locator,
      log: log.child({ cluster: region }),
      fences: this.fences,
      index: this.index,
      content: this.content,
      indexMaxAgeMs: this.ttlMs,
      port: this.port,
      ...tuning.queue,
    });
  }

  /**
   * Runs fn alone for this volume within this process. The gRPC server already refuses a second
   * call for a volume, but an offline expansion's helper attachment must never be mistaken for a
   * crash leftover and removed by a publish or delete of the same volume running in parallel
   * (direct callers, or a call the server gave up on that is still finishing).
   */
  exclusive<T>(volid: string, fn: () => Promise<T>): Promise<T> {
    return this.volumeLocks.run(volid, fn);
  }

  /** Storage rows of /cluster/resources (one per storage and node). */
  storages(signal?: AbortSignal, fresh = false): Promise<StorageResource[]> {
    return this.storageRowsRead.get(signal, fresh);
  }

  /** Rows for one storage id; re-read once when it is not known (a storage just added). */
  async storageRows(storage: string, signal?: AbortSignal): Promise<StorageResource[]> {
    let rows = (await this.storages(signal)).filter((r) => r.storage === storage);
    if (rows.length === 0) rows = (await this.storages(signal, true)).filter((r) => r.storage === storage);
    return rows;
  }
}

export const holdsImages = (r: StorageResource): boolean =>
  r.content
    .split(',')
    .map((s) => s.trim())
    .includes('images');
export const isAvailable = (r: StorageResource): boolean => r.status === undefined || r.status === 'available';
