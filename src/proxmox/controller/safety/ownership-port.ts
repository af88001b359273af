// The mutating half of the Proxmox API, as the driver may use it: every call that frees or
// allocates a volume, resizes a disk, or changes or unlinks keys of a VM config takes an
// OwnershipPermit, which only the ownership gate's decisions make (ownership.ts,
// ownership-day2.ts), and sends exactly what the permit names. One method per permit kind. The
// rest of src holds the API read-only by type (ProxmoxReadApi); nothing else calls those
// methods (test/unit/proxmox/controller/safety/no-bypass.test.ts). The move's helper VM has its
// own port (mover-port.ts).
import type { CallOptions, FreeOptions, ProxmoxWriteApi } from '../../api/api.js';
import { checkPermit as check, type OwnershipPermit } from './permit.js';

export class OwnershipPort {
  /** `onConfigTask`: each config task this process starts (the start-up fence's own set). */
  constructor(
    private readonly api: ProxmoxWriteApi,
    private readonly onConfigTask?: (upid: string) => void,
  ) {}

  freeDisk(p: OwnershipPermit<'free'>, o?: FreeOptions): Promise<string | null> {
    check(p, 'free');
    const { node, storage, volid } = p.body;
    return this.api.freeDisk(node, storage, volid, o);
  }

  /** A day-2 leftover (ownership-day2.ts: decideFreeLeftover). */
  freeLeftover(p: OwnershipPermit<'free-leftover'>, o?: FreeOptions): Promise<string | null> {
    check(p, 'free-leftover');
    const { node, storage, volid } = p.body;
    return this.api.freeDisk(node, storage, volid, o);
  }

  allocDisk(p: OwnershipPermit<'alloc'>, o?: CallOptions): Promise<string> {
    check(p, 'alloc');
    const { node, storage, req } = p.body;
    return this.api.allocDisk(node, storage, req, o);
  }

  resizeDisk(p: OwnershipPermit<'resize'>, o?: CallOptions): Promise<string | null> {
    check(p, 'resize');
    const { node, vmid, key, size, digest } = p.body;
    return this.api.resizeDisk(node, vmid, key, size, { ...o, digest });
  }

  async updateVmConfig(p: OwnershipPermit<'config'>, o?: CallOptions): Promise<string | null> {
    check(p, 'config');
    const { node, vmid, change } = p.body;
    const upid = await this.api.updateVmConfig(node, vmid, change, o);
    if (upid) this.onConfigTask?.(upid);
    return upid;
  }

  unlinkDisks(p: OwnershipPermit<'unlink'>, o?: CallOptions): Promise<void> {
    check(p, 'unlink');
    const { node, vmid, keys, digest } = p.body;
    return this.api.unlinkDisks(node, vmid, keys, { ...o, digest });
  }
}
