// The mutating half of the Proxmox API, as the driver may use it: every call that frees or
// allocates a volume, resizes a disk, or changes or unlinks keys of a VM config takes an
// OwnershipPermit, which only the ownership gate's decisions make (ownership.ts,
// ownership-day2.ts), and sends exactly what the permit names. One method per permit kind. The
// rest of src holds the API read-only by type (ProxmoxReadApi); nothing else calls those
// methods (test/unit/proxmox/controller/safety/no-bypass.test.ts). The move's helper VM has its
// own port (mover-port.ts).
import { Unimplemented } from '../../../errors.js';
import type {
  CallOptions,
  ConfigChange,
  FreeOptions,
  ProxmoxSnapshotApi,
  ProxmoxVmLifecycleWrite,
  ProxmoxWriteApi,
} from '../../api/api.js';
import { checkPermit as check, type OwnershipPermit } from './permit.js';
import { COPY_VM_NAMES, formatRecord } from './copy-vms.js';

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

  /** Whether the API behind this port can make thin copies (the HTTP adapter can; a fake may not). */
  canCopy(): boolean {
    return canCopy(this.api);
  }

  /** Sends one helper-VM step of a thin copy; returns its task's UPID. */
  async copyStep(p: OwnershipPermit<'copy'>, o?: CallOptions): Promise<string> {
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
      case 'grow': {
        const upid = await this.api.resizeDisk(s.node, s.vmid, 'scsi0', s.size, { ...o, digest: s.digest });
        if (!upid) throw new Error(`resize of VM ${s.vmid}: Proxmox answered without a task`);
        return upid;
      }
      case 'detach':
        return this.configTask(s.node, s.vmid, { delete: ['scsi0'], digest: s.digest }, o);
      case 'release':
        return this.configTask(s.node, s.vmid, { set: { [s.key]: s.placeholder }, digest: s.digest }, o);
      case 'free':
        return this.freeTask(s.node, s.storage, s.volid, o);
      case 'migrate':
        return api.migrateVm(s.node, s.vmid, s.target, o);
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

type CopyApi = ProxmoxWriteApi & ProxmoxVmLifecycleWrite & ProxmoxSnapshotApi;

/** Whether this API can make thin copies (the HTTP adapter can; a test fake may not). */
function canCopy(api: ProxmoxWriteApi): api is CopyApi {
  const a = api as Partial<CopyApi>;
  return typeof a.createVm === 'function' && typeof a.snapshotVm === 'function' && typeof a.linkedClone === 'function';
}

function copyApi(api: ProxmoxWriteApi): CopyApi {
  if (!canCopy(api)) throw new Unimplemented('this Proxmox API adapter cannot make snapshots or clones');
  return api;
}
