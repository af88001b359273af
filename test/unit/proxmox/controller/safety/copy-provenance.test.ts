// Exact provenance in the gate's copy rules (docs/ownership.md, "Ids"): a copy VM's snapshot goes
// only when it is the one the driver took for the record's name, over a disk a copy may start
// from (a look-alike record never deletes an admin's snapshot of a disk the driver does not own);
// a restored volume is a copy source exactly as its volume VM issued it; a disk under a name
// Proxmox gives a VM's own disks is never attached while no VM of that VMID exists.
import t from 'tap';
import type { ConfigEntry, VmResource } from '../../../../../src/proxmox/api/api.js';
import {
  type CopyStep,
  type CopyView,
  copyStepProblem,
  formatRecord,
  snapnameFor,
} from '../../../../../src/proxmox/controller/safety/copy-vms.js';
import { decideAttach } from '../../../../../src/proxmox/controller/safety/ownership.js';

const COPY = 812_000_001;
const VOL = 812_000_002;
const rec = (role: string, name: string) =>
  formatRecord({ role, controller: 9999, name, source: 's', created: 1 } as never);
const vmOf = (vmid: number, name: string): VmResource => ({
  type: 'qemu',
  vmid,
  name,
  node: 'hyper1',
  status: 'stopped',
});
const entries = (m: Record<string, string>): ConfigEntry[] => Object.entries(m).map(([key, value]) => ({ key, value }));

function view(copy: Record<string, string>, section: Record<string, string> | undefined, snapname: string): CopyView {
  const c = vmOf(COPY, 'pve-nfs-csi-copy');
  const r = vmOf(VOL, 'pve-nfs-csi-volume');
  const admin = vmOf(101, 'admin-vm');
  return {
    host: {
      fresh: true,
      vms: [c, r, admin],
      entries: [
        { vm: c, entries: entries({ description: rec('copy', 'snap-a'), ...copy }) },
        {
          vm: r,
          entries: entries({
            description: rec('volume', 'pvc-r'),
            unused0: `local-lvm:vm-${VOL}-pve-nfs-csi-released-disk-0`,
          }),
        },
        { vm: admin, entries: entries({ scsi0: 'local-lvm:vm-101-disk-0' }) },
      ],
      snapshots: new Map(section ? [[COPY, [{ name: snapname, values: section }]]] : []),
    },
    vmids: new Set([COPY, VOL, 101]),
    controllerVmId: 9999,
  };
}

const why = (st: CopyStep, v: CopyView) => copyStepProblem(st, v)?.message;
const ours = snapnameFor('snap-a');

t.test('a copy VM’s snapshot goes only when the driver took it, over a disk it may copy', async (t) => {
  const unsnap = (snapname: string): CopyStep => ({ op: 'unsnapshot', node: 'hyper1', vmid: COPY, snapname });
  const driver = { scsi0: 'local-lvm:vm-9999-pvc-a' };
  t.equal(why(unsnap(ours), view(driver, driver, ours)), undefined, 'its own, over a driver disk');
  t.equal(why(unsnap(ours), view({}, undefined, ours)), undefined, 'already gone: nothing to refuse');
  t.match(why(unsnap('admin-snap'), view(driver, driver, 'admin-snap')), /not one the driver took/);
  const foreign = { scsi0: 'local-lvm:vm-101-disk-1' };
  t.match(why(unsnap(ours), view(foreign, foreign, ours)), /neither a disk of this driver/, 'an admin’s disk');
  const two = { scsi0: 'local-lvm:vm-9999-pvc-a', scsi1: 'local-lvm:vm-101-disk-1' };
  t.match(why(unsnap(ours), view(two, two, ours)), /holds scsi1/);
});

t.test('a copy VM with a snapshot section is not destroyed', async (t) => {
  const destroy: CopyStep = { op: 'destroy', node: 'hyper1', vmid: COPY };
  const foreign = { scsi0: 'local-lvm:vm-101-disk-1' };
  t.match(why(destroy, view(foreign, foreign, 'admin-snap')), /still has a snapshot section/);
  t.equal(why(destroy, view(foreign, undefined, ours)), undefined);
});

t.test('a restored volume is a copy source exactly as its volume VM issued it', async (t) => {
  const hold = (volid: string): CopyStep => ({ op: 'hold', node: 'hyper1', vmid: COPY, volid, digest: 'd' });
  t.equal(why(hold(`local-lvm:vm-${VOL}-disk-0`), view({}, undefined, ours)), undefined);
  t.match(why(hold(`local-lvm:vm-${VOL}-disk-1`), view({}, undefined, ours)), /neither a disk of this driver/);
  t.match(why(hold(`other:vm-${VOL}-disk-0`), view({}, undefined, ours)), /neither a disk of this driver/);
});

t.test('attach refuses a Proxmox-named disk of the controller VMID while no VM has that VMID', async (t) => {
  const vms = [vmOf(111, 'talos-worker-1')];
  const target = { vmid: 111, node: 'hyper1', name: 'talos-worker-1' };
  const d = (disk: string) => ({ storage: 'local-lvm', disk, controllerVmId: 9999 });
  const refused = decideAttach(d('vm-9999-disk-3'), vms, target);
  t.notOk(refused.allowed);
  if (!refused.allowed) t.match(refused.refusal.message, /refusing to attach local-lvm:vm-9999-disk-3/);
  t.ok(decideAttach(d('vm-9999-pvc-a'), vms, target).allowed, 'a driver disk is no orphan');
  t.ok(decideAttach(d('vm-9999-disk-3'), [...vms, vmOf(9999, 'x')], target).allowed, 'with a VM 9999 it has an owner');
});
