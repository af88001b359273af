// Regression (found by the chaos suite's bad-input table): a handle naming a VM's own disk — here
// the boot disk of running VM 101, `homelab/hyper1/local-lvm/vm-101-disk-0` — is not a volume
// of this driver. ControllerPublishVolume to that same VM answered OK with slot 0 (the disk "is
// already attached"), and ControllerUnpublishVolume from it unlinked scsi0: on a running VM the
// boot disk then sits as a pending delete, and the VM loses it at its next start.
// Both must refuse (FAILED_PRECONDITION) and leave the VM's config as it was.
import t from 'tap';
import pino from 'pino';
import type * as T from '../../../src/csi/types.js';
import { isCsiError } from '../../../src/errors.js';
import { createProxmoxController } from '../../../src/proxmox/controller/controller.js';
import { SimulatorAdmin, startSimulator } from '../../../sim/index.js';

const ctx = (): T.CallContext => ({ log: pino({ level: 'silent' }), signal: AbortSignal.timeout(30_000) });
const MOUNT: T.VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
  accessType: 'mount',
};
const BOOT = 'homelab/hyper1/local-lvm/vm-101-disk-0';

async function kind(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (e) {
    return isCsiError(e) ? e.kind : `untyped: ${(e as Error).message}`;
  }
}

t.test("a VM's own disk is neither published to nor unpublished from that VM", async (t) => {
  const sim = await startSimulator({
    backend: 'none',
    faults: { authFailureDelayMs: 0, taskDurationMs: 5, lockTimeoutMs: 1000 },
  });
  t.teardown(() => sim.close());
  const c = createProxmoxController({
    config: {
      clusters: [
        {
          url: sim.url,
          insecure: false,
          caFile: sim.caFile,
          tokenId: sim.tokenId,
          tokenSecret: sim.tokenSecret,
          region: 'homelab',
        },
      ],
      controllerVmId: 9999,
    },
    log: pino({ level: 'silent' }),
    queryTimeoutMs: 10_000,
    tuning: { queue: { confirmTimeoutMs: 1500 } },
  });
  t.teardown(() => c.close());
  const admin = new SimulatorAdmin(sim.adminUrl);
  const vm101 = async () =>
    ((await admin.state()) as { vms: { vmid: number; digest: string; pendingDelete: string[] }[] }).vms.find(
      (v) => v.vmid === 101,
    )!;
  const before = await vm101();

  t.equal(
    await kind(
      c.controllerPublishVolume!(
        {
          volumeId: BOOT,
          nodeId: 'talos-cp-1',
          volumeCapability: MOUNT,
          readonly: false,
          secrets: {},
          volumeContext: {},
        },
        ctx(),
      ),
    ),
    'FailedPrecondition',
    'publish to its own VM is refused',
  );
  t.equal(
    await kind(c.controllerUnpublishVolume!({ volumeId: BOOT, nodeId: 'talos-cp-1', secrets: {} }, ctx())),
    'FailedPrecondition',
    'unpublish from its own VM is refused',
  );
  const after = await vm101();
  t.same(after.pendingDelete, [], 'no pending delete of the boot disk');
  t.equal(after.digest, before.digest, "VM 101's config is unchanged");
});
