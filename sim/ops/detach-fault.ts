// The `silent` detach fault the way Proxmox produces it. qemu-server leaves a disk's delete in
// the pending section without an error only when the VM's `hotplug` option lacks `disk`
// (vmconfig_hotplug_pending: `die "skip\n" if !$hotplug_features->{disk}`); on a VM that
// hot-plugs disks the synchronous PUT …/config or …/unlink either unplugs the disk (verified by
// qemu_devicedelverify) and drops the key, or answers 400 `hotplug problem - …`. So while the
// fault applies to a VM, its `hotplug` option lacks `disk`, visible in its config and digest as
// if an admin had run `qm set <vmid> --hotplug network,usb`; lifting the fault puts the old value
// back (pending changes stay pending, as they would).
import type { VmModel } from '../model/types.js';
import type { SimContext } from './context.js';

const saved = new WeakMap<VmModel, string | undefined>();

function withoutDisk(value: string | undefined): string {
  const v = value ?? '1';
  const features = v === '1' ? ['network', 'disk', 'usb'] : v === '0' ? [] : v.split(',');
  const rest = features.filter((f) => f !== 'disk');
  return rest.length ? rest.join(',') : '0';
}

/** Brings every VM's `hotplug` option in line with the current detach fault. */
export function syncSilentDetach(ctx: SimContext): void {
  for (const vm of ctx.state.vms.values()) {
    const silent = ctx.faults.detachMode(vm.vmid) === 'silent';
    if (silent && !saved.has(vm)) {
      const before = vm.config.get('hotplug');
      saved.set(vm, before);
      vm.config.set('hotplug', withoutDisk(before));
    } else if (!silent && saved.has(vm)) {
      const before = saved.get(vm);
      saved.delete(vm);
      if (before === undefined) vm.config.delete('hotplug');
      else vm.config.set('hotplug', before);
    }
  }
}
