// The mutating calls of `pve-nfs-csi move`, each with a permit of the ownership gate's day-2
// decisions (ownership-day2.ts): create, hold, migrate, release and destroy of the helper VM,
// and the free of a source copy the migration left behind. Sends exactly what the permit names.
import type { CallOptions, ProxmoxVmLifecycleWrite, ProxmoxWriteApi } from '../../api/api.js';
import { OwnershipPort } from './ownership-port.js';
import { checkPermit as check, type OwnershipPermit } from './permit.js';

export class MoverPort {
  /** The volume calls (a source copy left behind: freeLeftover). */
  readonly disks: OwnershipPort;

  constructor(private readonly api: ProxmoxWriteApi & ProxmoxVmLifecycleWrite) {
    this.disks = new OwnershipPort(api);
  }

  create(p: OwnershipPermit<'mover-create'>, o?: CallOptions): Promise<string> {
    check(p, 'mover-create');
    const { node, vmid, options } = p.body;
    return this.api.createVm(node, vmid, options, o);
  }

  hold(p: OwnershipPermit<'mover-hold'>, o?: CallOptions): Promise<string | null> {
    check(p, 'mover-hold');
    const { node, vmid, change } = p.body;
    return this.api.updateVmConfig(node, vmid, change, o);
  }

  migrate(p: OwnershipPermit<'mover-migrate'>, o?: CallOptions): Promise<string> {
    check(p, 'mover-migrate');
    const { node, vmid, target } = p.body;
    return this.api.migrateVm(node, vmid, target, o);
  }

  release(p: OwnershipPermit<'mover-release'>, o?: CallOptions): Promise<string | null> {
    check(p, 'mover-release');
    const { node, vmid, change } = p.body;
    return this.api.updateVmConfig(node, vmid, change, o);
  }

  destroy(p: OwnershipPermit<'mover-destroy'>, o?: CallOptions): Promise<string> {
    check(p, 'mover-destroy');
    const { node, vmid } = p.body;
    return this.api.destroyVm(node, vmid, o);
  }
}
