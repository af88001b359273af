// Reading one VM's config for the attach queue: config, pending entries and digest in one GET
// …/pending, following a VM that migrated to another node, and re-reading until a change shows
// (hot-plug still running, a delete still pending). Every read lands in the disk index.
import { NotFound, isCsiError } from '../../../errors.js';
import type { ConfigEntry, ProxmoxReadApi } from '../../api/api.js';
import { sleep } from '../../api/tasks.js';
import type { DiskIndex } from '../state/disk-index.js';
import type { VmLocator, VmRef } from '../state/vm-locator.js';

export interface VmState {
  digest?: string | undefined;
  entries: ConfigEntry[];
}

export interface VmReaderOptions {
  api: ProxmoxReadApi;
  cluster: string;
  locator: VmLocator;
  index: DiskIndex;
  /** How long poll() re-reads before it returns what it has. */
  confirmTimeoutMs: number;
}

export class VmReader {
  constructor(private readonly o: VmReaderOptions) {}

  /** Config, pending entries and digest in one read; follows (updates `vm.node`) a VM that migrated. */
  async read(vm: VmRef): Promise<VmState> {
    for (let moved = false; ; moved = true) {
      try {
        const at = Date.now();
        const entries = await this.o.api.vmPending(vm.node, vm.vmid);
        this.o.index.note(vm, entries, at);
        return {
          digest: entries.find((e) => e.key === 'digest')?.value || undefined,
          entries: entries.filter((e) => e.key !== 'digest'),
        };
      } catch (e) {
        if (!isCsiError(e, 'NotFound') || moved) throw e;
        const now = await this.o.locator.byVmid(vm.vmid);
        if (!now)
          throw new NotFound(`VM ${vm.name} (${vm.vmid}) no longer exists in Proxmox cluster ${this.o.cluster}`, {
            cause: e,
          });
        if (now.node === vm.node) throw e;
        vm.node = now.node;
      }
    }
  }

  /** Re-reads until `done(entries)` or the confirm timeout; returns the last state read. */
  async poll(vm: VmRef, done: (entries: ConfigEntry[]) => boolean): Promise<VmState> {
    const deadline = Date.now() + this.o.confirmTimeoutMs;
    let delay = 25;
    for (;;) {
      const state = await this.read(vm);
      if (done(state.entries) || Date.now() + delay > deadline) return state;
      await sleep(delay);
      delay = Math.min(delay * 2, 1_000);
    }
  }
}
