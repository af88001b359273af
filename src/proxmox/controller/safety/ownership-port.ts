// The mutating half of the Proxmox API, as the controller may use it: every call that frees or
// allocates a volume, resizes a disk, or changes or unlinks keys of a VM config takes an
// OwnershipPermit, which only the ownership gate's decisions make (ownership.ts), and sends
// exactly what the permit names. Nothing else in the controller calls those API methods
// (test/unit/proxmox/controller/safety/no-bypass.test.ts).
import type { CallOptions, FreeOptions, ProxmoxApi } from '../../api/api.js';
import { OwnershipPermit, type PermitKind } from './ownership.js';

function check(p: OwnershipPermit<PermitKind>, kind: PermitKind): void {
  if (!(p instanceof OwnershipPermit) || !p.is(kind)) throw new Error(`ownership port: not a ${kind} permit`);
}

export class OwnershipPort {
  /** `onConfigTask`: each config task this process starts (the start-up fence's own set). */
  constructor(
    private readonly api: ProxmoxApi,
    private readonly onConfigTask?: (upid: string) => void,
  ) {}

  freeDisk(p: OwnershipPermit<'free'>, o?: FreeOptions): Promise<string | null> {
    check(p, 'free');
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
