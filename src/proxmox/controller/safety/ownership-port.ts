// The mutating half of the Proxmox API, as the controller may use it: every call that frees or
// allocates a volume, resizes a disk, or changes or unlinks keys of a VM config takes an
// OwnershipPermit, which only the ownership gate's decisions make (ownership.ts), and sends
// exactly what the permit names. Nothing else in the controller calls those API methods
// (test/unit/proxmox/controller/safety/no-bypass.test.ts).
import { Unimplemented } from '../../../errors.js';
import type { CallOptions, FreeOptions, ProxmoxApi, ProxmoxSnapshotApi, ProxmoxVmLifecycle } from '../../api/api.js';
import type { ConfigChange } from '../../api/api.js';
import { OwnershipPermit, type PermitKind } from './ownership.js';
import { COPY_VM_NAMES, formatRecord } from './copy-vms.js';

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

  /** Sends one helper-VM step of a thin copy; returns its task's UPID. */
  copyStep(p: OwnershipPermit<'copy'>, o?: CallOptions): Promise<string> {
    check(p, 'copy');
    const api = copyApi(this.api);
    const s = p.body;
    switch (s.op) {
      case 'create':
        return api.createVm(
          s.node,
          s.vmid,
          { name: COPY_VM_NAMES[s.record.role], description: formatRecord(s.record) },
          o,
        );
      case 'hold':
        return this.configTask(s.node, s.vmid, { set: { scsi0: s.volid }, digest: s.digest }, o);
      case 'snapshot':
        return api.snapshotVm(s.node, s.vmid, s.snapname, o);
      case 'unsnapshot':
        return api.deleteVmSnapshot(s.node, s.vmid, s.snapname, o);
      case 'clone':
        return api.linkedClone(
          s.node,
          s.vmid,
          {
            newid: s.newid,
            snapname: s.snapname,
            name: COPY_VM_NAMES[s.record.role],
            description: formatRecord(s.record),
          },
          o,
        );
      case 'detach':
        return this.configTask(s.node, s.vmid, { delete: ['scsi0'], digest: s.digest }, o);
      case 'release':
        return this.configTask(s.node, s.vmid, { set: { [s.key]: s.placeholder }, digest: s.digest }, o);
      case 'free':
        return this.freeTask(s.node, s.storage, s.volid, o);
      case 'destroy':
        return api.destroyVm(s.node, s.vmid, o);
    }
  }

  private async freeTask(node: string, storage: string, volid: string, o?: CallOptions): Promise<string> {
    const upid = await this.api.freeDisk(node, storage, volid, o);
    if (!upid) throw new Error(`free ${volid}: Proxmox answered without a task`);
    return upid;
  }

  private async configTask(node: string, vmid: number, change: ConfigChange, o?: CallOptions): Promise<string> {
    const upid = await this.api.updateVmConfig(node, vmid, change, o);
    if (!upid) throw new Error(`config change of VM ${vmid}: Proxmox answered without a task`);
    this.onConfigTask?.(upid);
    return upid;
  }
}

type CopyApi = ProxmoxApi & ProxmoxVmLifecycle & ProxmoxSnapshotApi;

/** Whether this API can make thin copies (the HTTP adapter can; a test fake may not). */
export function canCopy(api: ProxmoxApi): api is CopyApi {
  const a = api as Partial<CopyApi>;
  return typeof a.createVm === 'function' && typeof a.snapshotVm === 'function' && typeof a.linkedClone === 'function';
}

function copyApi(api: ProxmoxApi): CopyApi {
  if (!canCopy(api)) throw new Unimplemented('this Proxmox API adapter cannot make snapshots or clones');
  return api;
}
