// The race a digest closes: another writer (another replica, an admin) takes a volume out of a
// VM's slot and puts another disk into it after the controller read the VM's config and before
// its change (sent with that read's digest) reaches Proxmox. The controller's change is held back
// by the simulator's latency on its route; this waits for the controller's read, then swaps.
import type { SimulatorAdmin } from '../../sim/index.js';
import type { ProxmoxApi } from '../../src/proxmox/api/api.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function swapSlotAfterRead(o: {
  admin: SimulatorAdmin;
  /** A client of its own: the other writer. */
  other: ProxmoxApi;
  vm: { vmid: number; node: string };
  /** The request log's sequence number before the controller's call. */
  since: number;
  key: string;
  /** The disk put into the slot, e.g. `local-lvm:vm-9999-pvc-b`. */
  volid: string;
}): Promise<void> {
  for (let i = 0; i < 400; i++) {
    const { entries } = await o.admin.requests(o.since);
    if (entries.some((e) => e.route === 'GET /nodes/{node}/qemu/{vmid}/pending' && e.path.includes(`/${o.vm.vmid}/`)))
      break;
    await sleep(5);
  }
  await sleep(100);
  // The volume out of the slot, another disk into it, in one change.
  await o.other.updateVmConfig(o.vm.node, o.vm.vmid, { set: { [o.key]: o.volid }, waitSeconds: 5 });
}
