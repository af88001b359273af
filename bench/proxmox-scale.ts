// Scale: the Proxmox controller over gRPC against a simulated cluster of 3 hosts × 40 VMs with
// 500 volumes, 20 ms per API call. ListVolumes with paging, GetCapacity, a publish to the last
// VM (right after a listing, and again once every cache expired), a CreateVolume: calls and
// time, to see which costs grow with VMs or volumes. Run: npx tsx bench/proxmox-scale.ts [--md]
import { SimulatorAdmin, startSimulator } from '../sim/index.js';
import type { VolumeCapability } from '../test/helpers/csi-client.js';
import { benchFlags } from './lib/flags.js';
import { startProxmoxController } from './lib/proxmox-controller.js';
import { pool, printTable, since, type Row } from './lib/table.js';

const values = benchFlags({ latency: 20, vms: 40, volumes: 500 });
const LATENCY = values.latency;
const PER_HOST = values.vms;
const VOLUMES = values.volumes;
const HOSTS = ['hyper1', 'hyper2', 'hyper3'];
const GiB = 2 ** 30;
const MOUNT: VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
};
const topo = (zone: string) => ({
  requisite: [],
  preferred: [{ segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': zone } }],
});

const config = {
  cluster: 'homelab',
  version: { version: '8.2.4', release: '8.2', repoid: 'faa83925c9641325' },
  tokens: [{ id: 'kubernetes-csi@pve!csi', secret: '0b6e3f6a-51c8-4d29-9a43-6f1c2b7d8e90', role: 'CSI' }],
  nodes: HOSTS.map((name, h) => ({
    name,
    storages: [{ id: 'local-lvm', type: 'lvmthin', vgname: 'pve', thinpool: 'data', size: '4T', used: '24G' }],
    vms: Array.from({ length: PER_HOST }, (_, i) => ({
      vmid: 1000 + h * 100 + i,
      name: `talos-${name}-${i}`,
      scsihw: 'virtio-scsi-single',
      memory: 4096,
      cores: 2,
      bootDisk: { storage: 'local-lvm', size: '32G' },
    })),
  })),
  faults: { authFailureDelayMs: 0, taskDurationMs: 5, lockTimeoutMs: 10_000 },
};
const LAST_VM = `talos-hyper3-${PER_HOST - 1}`;

const sim = await startSimulator({ backend: 'none', config });
const admin = new SimulatorAdmin(sim.adminUrl);
const ctrl = await startProxmoxController(sim, { tmpPrefix: 'bench-pve-scale-', callTimeoutMs: 300_000 });
const { c } = ctrl;
try {
  // Setup without latency: 500 volumes spread over the hosts.
  await pool(
    Array.from({ length: VOLUMES }, (_, i) => i),
    16,
    (i) =>
      c.controller.CreateVolume({
        name: `pvc-scale-${String(i).padStart(4, '0')}`,
        capacityRange: { requiredBytes: String(GiB) },
        volumeCapabilities: [MOUNT],
        parameters: { storage: 'local-lvm' },
        accessibilityRequirements: topo(HOSTS[i % 3] ?? 'hyper1'),
      }),
  );
  await new Promise((r) => setTimeout(r, 12_500)); // past the start-up window, caches expired
  await admin.patchFaults({ latencyMs: LATENCY });
  const rows: Row[] = [];
  const measure = async (what: string, fn: () => Promise<unknown>, note = ''): Promise<void> => {
    await admin.resetCounters();
    const t0 = process.hrtime.bigint();
    await fn();
    const ms = since(t0);
    const k = await admin.counters();
    const top = Object.entries(k.byRoute)
      .sort((a, b) => b[1] - a[1])
      .slice(0, 3)
      .map(([r, n]) => `${r.replace('/nodes/{node}', '…')} ×${n}`)
      .join(', ');
    rows.push({ what: `${what}: ${k.total} calls`, samples: [ms], note: `${note}${note ? '; ' : ''}${top}` });
  };
  let pages = 0;
  await measure(
    'ListVolumes, pages of 100 (see note)',
    async () => {
      let token = '';
      do {
        const r = await c.controller.ListVolumes({ maxEntries: 100, startingToken: token });
        token = r.nextToken;
        pages++;
      } while (token);
    },
    'the first page reads everything, later pages reuse it',
  );
  console.log(`ListVolumes: ${pages} pages`);
  await measure('GetCapacity (host + storage)', () =>
    c.controller.GetCapacity({
      parameters: { storage: 'local-lvm' },
      accessibleTopology: {
        segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper3' },
      },
    }),
  );
  await measure('GetCapacity (whole cluster)', () => c.controller.GetCapacity({}));
  const vol = `homelab/hyper3/local-lvm/vm-9999-pvc-scale-${String(VOLUMES - 1 - ((VOLUMES - 1 - 2) % 3)).padStart(4, '0')}`;
  await measure(
    `ControllerPublish to the last VM after a listing`,
    () => c.controller.ControllerPublishVolume({ volumeId: vol, nodeId: LAST_VM, volumeCapability: MOUNT }),
    'disk index warm',
  );
  await c.controller.ControllerUnpublishVolume({ volumeId: vol, nodeId: LAST_VM });
  await new Promise((r) => setTimeout(r, 5_500));
  await measure(
    `ControllerPublish to the last VM, caches cold`,
    () => c.controller.ControllerPublishVolume({ volumeId: vol, nodeId: LAST_VM, volumeCapability: MOUNT }),
    `other VMs of the host read once (${PER_HOST - 1})`,
  );
  await measure('ControllerUnpublish', () =>
    c.controller.ControllerUnpublishVolume({ volumeId: vol, nodeId: LAST_VM }),
  );
  await measure('CreateVolume', () =>
    c.controller.CreateVolume({
      name: 'pvc-scale-new',
      capacityRange: { requiredBytes: String(GiB) },
      volumeCapabilities: [MOUNT],
      parameters: { storage: 'local-lvm' },
      accessibilityRequirements: topo('hyper3'),
    }),
  );
  await measure('DeleteVolume', () =>
    c.controller.DeleteVolume({ volumeId: 'homelab/hyper3/local-lvm/vm-9999-pvc-scale-new' }),
  );
  printTable({
    title: `Scale: ${HOSTS.length} hosts × ${PER_HOST} VMs, ${VOLUMES} volumes, +${LATENCY} ms per API call (over gRPC)`,
    unit: 'ms',
    rows,
  });
} finally {
  await ctrl.close();
  await sim.close();
}
