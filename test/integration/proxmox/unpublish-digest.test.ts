// Regression: an unpublish never detaches a disk that took the slot after the controller read
// the VM's config. The unpublish reads the config (which scsiN holds the volume), then unlinks
// that key; another writer (another replica, an admin) detaches the volume and puts another
// disk into the same slot in between. The unlink carries the read's digest, so Proxmox refuses
// it (`checksum mismatch`), the controller reads again and finds its volume gone: done, and the
// other disk stays attached. Before the digest, PUT …/unlink detached the other disk.
import t from 'tap';
import pino from 'pino';
import type * as T from '../../../src/csi/types.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { createProxmoxController } from '../../../src/proxmox/controller/controller.js';
import { GiB } from '../../../src/proxmox/controller/params/params.js';
import { parseVolumeId } from '../../../src/proxmox/volume-id.js';
import { SimulatorAdmin, startSimulator } from '../../../sim/index.js';
import { swapSlotAfterRead } from '../../helpers/slot-swap.js';
import { clusterOf } from '../../helpers/proxmox-on-sim.js';

const MOUNT: T.VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
  accessType: 'mount',
};
const PARAMS = { storage: 'local-lvm', ssd: 'true', backup: 'true' };
const VM = { name: 'talos-worker-1', vmid: 111, node: 'hyper1' };
const ctx = (): T.CallContext => ({ log: pino({ level: 'silent' }), signal: AbortSignal.timeout(30_000) });
const createReq = (name: string): T.CreateVolumeRequest => ({
  name,
  capacityRange: { requiredBytes: String(GiB), limitBytes: '0' },
  volumeCapabilities: [MOUNT],
  parameters: PARAMS,
  secrets: {},
  volumeContentSource: null,
  mutableParameters: {},
  accessibilityRequirements: {
    requisite: [],
    preferred: [{ segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper1' } }],
  },
});

t.test('a slot reused by another disk since the read is never detached', async (t) => {
  const sim = await startSimulator({ backend: 'none', faults: { authFailureDelayMs: 0, taskDurationMs: 5 } });
  t.teardown(() => sim.close());
  const admin = new SimulatorAdmin(sim.adminUrl);
  const cluster = clusterOf(sim);
  const c = createProxmoxController({
    config: { clusters: [cluster], controllerVmId: 9999 },
    log: pino({ level: 'silent' }),
    tuning: { startupFenceMs: 0 },
  });
  t.teardown(() => c.close());
  const other = createHttpProxmoxApi({ cluster });
  t.teardown(() => other.close());

  const { controllerPublishVolume, controllerUnpublishVolume } = c;
  if (!controllerPublishVolume || !controllerUnpublishVolume) throw new Error('the Proxmox controller publishes');
  const a = (await c.createVolume(createReq('pvc-digest-a'), ctx())).volume?.volumeId ?? '';
  const b = (await c.createVolume(createReq('pvc-digest-b'), ctx())).volume?.volumeId ?? '';
  const published = await controllerPublishVolume.call(
    c,
    { volumeId: a, nodeId: VM.name, volumeCapability: MOUNT, readonly: false, secrets: {}, volumeContext: PARAMS },
    ctx(),
  );
  const key = `scsi${published.publishContext?.lun ?? '?'}`;
  const diskA = parseVolumeId(a)?.disk ?? 'a?';
  const diskB = parseVolumeId(b)?.disk ?? 'b?';

  // The controller's detach (whichever form it takes) arrives at Proxmox only after the swap.
  await admin.patchFaults({
    latencyByRoute: { 'PUT /nodes/{node}/qemu/{vmid}/config': 600, 'PUT /nodes/{node}/qemu/{vmid}/unlink': 600 },
  });
  const mark = (await admin.requests()).lastSeq;
  const unpublish = controllerUnpublishVolume.call(c, { volumeId: a, nodeId: VM.name, secrets: {} }, ctx());
  await swapSlotAfterRead({ admin, other, vm: VM, since: mark, key, volid: `local-lvm:${diskB}` });

  await unpublish;
  const { vms } = (await admin.state()) as { vms: { vmid: number; config: Record<string, string> }[] };
  const config = vms.find((v) => v.vmid === VM.vmid)?.config ?? {};
  t.match(config[key] ?? '', new RegExp(`^local-lvm:${diskB}(,|$)`), `the other disk is still attached as ${key}`);
  t.notOk(
    Object.values(config).some((v) => v.includes(diskA)),
    'the unpublished volume is not on the VM',
  );
  const k = await admin.counters();
  t.ok(
    (k.errorsByRoute['PUT /nodes/{node}/qemu/{vmid}/config'] ?? 0) >= 1,
    'the detach with the stale digest was refused by Proxmox',
  );
  await admin.patchFaults({ latencyByRoute: {} });
});
