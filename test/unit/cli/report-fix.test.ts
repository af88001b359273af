// `report --fix --yes` acts through the Proxmox ownership gate (src/cli/report/fix.ts): the scan
// can be minutes old when an action runs, so each free is decided again on what is there now.
// A VolumeAttributesClass marker was freed by a direct API call that checked only the PVs: a
// marker attached by hand, or named by a snapshot section, since the scan was freed (seen
// failing before the gate: the marker was gone).
import t from 'tap';
import { pino } from 'pino';
import type { KubeApi } from '../../../src/k8s/index.js';
import type { NfsStores } from '../../../src/nfs/controller/store/store.js';
import { runAction } from '../../../src/cli/report/fix.js';
import { Cluster } from '../../../src/proxmox/controller/state/cluster.js';
import { FakeProxmox } from '../proxmox/api/fake-api.js';

const MARKER = 'vm-9999-pvc-gone+vac1-b0';

function setup(pvHandles: string[] = []) {
  const f = new FakeProxmox();
  f.addNode('hyper1');
  f.addVm({ vmid: 111, name: 'talos-worker-1', node: 'hyper1', running: false });
  f.storageOf('hyper1', 'local-lvm').volumes.set(MARKER, 4 * 2 ** 20);
  const log = pino({ level: 'silent' });
  const cluster = new Cluster('homelab', f, log);
  const pvs = pvHandles.map((h, i) => ({
    metadata: { name: `pv-${i}` },
    spec: { csi: { driver: 'csi.proxmox.sinextra.dev', volumeHandle: h } },
  }));
  const ctx = {
    core: { clusters: new Map([['homelab', cluster]]), defaultRegion: 'homelab', controllerVmId: 9999, log },
    kube: { listPersistentVolumes: () => Promise.resolve(pvs) } as unknown as KubeApi,
    stores: {} as NfsStores,
    nfs: { classes: [], addresses: new Map<string, readonly string[]>() },
    log,
    signal: AbortSignal.timeout(5_000),
  };
  const action = {
    type: 'free-marker' as const,
    region: 'homelab',
    node: 'hyper1',
    storage: 'local-lvm',
    volid: `local-lvm:${MARKER}`,
  };
  const there = () => f.storageOf('hyper1', 'local-lvm').volumes.has(MARKER);
  return { f, ctx, action, there };
}

const rejection = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

t.test('a leftover marker nothing names is freed', async (t) => {
  const s = setup();
  t.equal(await runAction(s.ctx, s.action), 'freed');
  t.notOk(s.there());
});

t.test('a marker attached, pending or snapshotted since the scan is kept', async (t) => {
  for (const where of ['config', 'pending', 'snapshot'] as const) {
    const s = setup();
    const vm = s.f.vmOf(111);
    const line = `local-lvm:${MARKER},size=4M`;
    if (where === 'config') vm.config.set('scsi6', line);
    else if (where === 'pending') vm.pending.set('sata3', line);
    else vm.snapshots?.set('pre-upgrade', new Map([['virtio2', line]]));
    t.match(await rejection(runAction(s.ctx, s.action)), { reason: 'referenced' }, where);
    t.ok(s.there(), `${where}: kept`);
  }
});

t.test('a marker of a disk a PV names now is kept', async (t) => {
  const s = setup(['homelab/hyper1/local-lvm/vm-9999-pvc-gone']);
  t.match(await rejection(runAction(s.ctx, s.action)), { message: /PersistentVolume pv-0 names it/ });
  t.ok(s.there());
});

t.test('delete-volume: a PV naming the disk now keeps it, before DeleteVolume reads anything', async (t) => {
  const s = setup(['homelab/hyper1/local-lvm/vm-9999-pvc-gone']);
  s.f.storageOf('hyper1', 'local-lvm').volumes.set('vm-9999-pvc-gone', 2 ** 30);
  s.f.resetCalls();
  const err = await rejection(
    runAction(s.ctx, {
      type: 'delete-volume',
      region: 'homelab',
      volumeId: 'homelab/hyper1/local-lvm/vm-9999-pvc-gone',
    }),
  );
  t.match(err, { message: /PersistentVolume pv-0 names it/ });
  t.equal(s.f.count(), 0, 'no Proxmox call');
  t.ok(s.f.storageOf('hyper1', 'local-lvm').volumes.has('vm-9999-pvc-gone'));
});
