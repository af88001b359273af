// Regression (found by the chaos suite's bad-input table): a handle naming a VM's own disk — here
// the boot disk of running VM 101, `homelab/hyper1/local-lvm/vm-101-disk-0` — is not a volume
// of this driver. ControllerPublishVolume to that same VM answered OK with slot 0 (the disk "is
// already attached"), and ControllerUnpublishVolume from it unlinked scsi0: on a running VM the
// boot disk then sits as a pending delete, and the VM loses it at its next start.
// Both must refuse (FAILED_PRECONDITION) and leave the VM's config as it was.
import t from 'tap';
import { callCtx, publishReq } from '../../helpers/csi-requests.js';
import { kindOf as kind } from '../../helpers/outcome.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';

const ctx = () => callCtx(30_000);
const BOOT = 'homelab/hyper1/local-lvm/vm-101-disk-0';

t.test("a VM's own disk is neither published to nor unpublished from that VM", async (t) => {
  const { c, state } = await startProxmoxOnSim(t);
  const vm101 = async () => {
    const vm = (await state()).vms.find((v) => v.vmid === 101);
    if (!vm) throw new Error('the simulator has no VM 101');
    return vm;
  };
  const before = await vm101();

  t.equal(
    await kind(c.controllerPublishVolume(publishReq(BOOT, 'talos-cp-1'), ctx())),
    'FailedPrecondition',
    'publish to its own VM is refused',
  );
  t.equal(
    await kind(c.controllerUnpublishVolume({ volumeId: BOOT, nodeId: 'talos-cp-1', secrets: {} }, ctx())),
    'FailedPrecondition',
    'unpublish from its own VM is refused',
  );
  const after = await vm101();
  t.same(after.pendingDelete, [], 'no pending delete of the boot disk');
  t.equal(after.digest, before.digest, "VM 101's config is unchanged");
});
