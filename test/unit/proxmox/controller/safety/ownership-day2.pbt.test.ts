// The property-based search of the day-2 Proxmox paths (docs/ownership.md, "Day-2 paths"):
// generated clusters (references on every bus, unusedN, pending, snapshot sections; driver,
// foreign, orphan disks and markers; a VM already holding the controller VMID, ours or not;
// static PVs naming disks) × the real `report --fix` actions (runAction: delete-volume,
// free-marker) and the real move helper (MoverVm: hold, migrate, release, free a source copy),
// aimed at any disk, as a stale scan or a wrong plan could. Invariant after every step: nothing
// not provably ours is freed, migrated or changed — a volume leaves hyper1 only when it is the
// step's target, of the driver's scheme (or a marker of such a disk), named by no VM config key
// and by no PV before the step (a migration: only by the helper's unusedN); no VM but the helper
// changes; the helper is touched only when it is ours. PBT_SEED replays, PBT_RUNS sets the cases.
import t from 'tap';
import fc from 'fast-check';
import { pino } from 'pino';
import type { KubeApi } from '../../../../../src/k8s/index.js';
import type { NfsStores } from '../../../../../src/nfs/controller/store/store.js';
import { runAction } from '../../../../../src/cli/report/fix.js';
import { Cluster } from '../../../../../src/proxmox/controller/state/cluster.js';
import { MOVER_VM_NAME, MoverVm } from '../../../../../src/proxmox/mover-vm.js';
import {
  type ClusterSpec,
  DISKS,
  NODE,
  REGION,
  STORAGE,
  clusterArb,
  driverDisk,
  handleOf,
  pbtSettings,
  refValue,
} from '../../../../helpers/proxmox-ownership.js';
import { FakeMoverProxmox } from '../../../cli/move/fake-mover.js';

const GiB = 2 ** 30;
const CTRL = 9999;
const TARGET = 'hyper2';
const MARKERS = ['vm-9999-pvc-a+vac1-b0', 'vm-9999-pvc-c+vac2-i100', 'vm-101-disk-1+vac1-b1'];
const ALL = [...DISKS, ...MARKERS];

type Helper = 'none' | 'ours-empty' | 'ours-holding' | 'foreign';
interface World {
  spec: ClusterSpec;
  markers: string[];
  /** Disks a PersistentVolume names (by handle on hyper1). */
  pvs: string[];
  helper: Helper;
  helperDisk: string;
  /** References to markers (attached or snapshotted by hand). */
  markerRefs: Array<{ vm: number; key: string; marker: string; where: 'config' | 'pending' | 'snapshot' }>;
}
type Op =
  | { kind: 'delete-volume' | 'free-marker' | 'hold' | 'migrate' | 'free-source'; disk: string }
  | { kind: 'release'; disk: string };

const worldArb: fc.Arbitrary<World> = fc.record({
  spec: clusterArb,
  markers: fc.subarray(MARKERS),
  pvs: fc.subarray(ALL, { maxLength: 3 }),
  helper: fc.constantFrom<Helper>('none', 'ours-empty', 'ours-holding', 'foreign'),
  helperDisk: fc.constantFrom(...DISKS),
  markerRefs: fc.array(
    fc.record({
      vm: fc.constantFrom(101, 111, 131, 141),
      key: fc.constantFrom('scsi5', 'virtio3', 'unused2'),
      marker: fc.constantFrom(...MARKERS),
      where: fc.constantFrom('config' as const, 'pending' as const, 'snapshot' as const),
    }),
    { maxLength: 2 },
  ),
});
const opArb: fc.Arbitrary<Op> = fc.record({
  kind: fc.constantFrom('delete-volume', 'free-marker', 'hold', 'migrate', 'free-source', 'release' as const),
  disk: fc.constantFrom(...ALL),
});

function build(w: World): FakeMoverProxmox {
  const f = new FakeMoverProxmox();
  f.addNode(NODE);
  f.addNode(TARGET);
  for (const v of w.spec.vms) f.addVm({ vmid: v.vmid, name: v.name, node: NODE, running: v.running });
  for (const d of w.spec.disks) f.storageOf(NODE, STORAGE).volumes.set(d.disk, d.gib * GiB);
  for (const m of w.markers) f.storageOf(NODE, STORAGE).volumes.set(m, 4 * 2 ** 20);
  const refs = [...w.spec.refs, ...w.markerRefs.map((m) => ({ ...m, disk: m.marker, wwn: 'none' as const }))];
  for (const r of refs) {
    const vm = f.vms.get(r.vm);
    if (!vm) continue;
    const value = refValue(r);
    if (r.where === 'config') vm.config.set(r.key, value);
    else if (r.where === 'pending') vm.pending.set(r.key, value);
    else {
      const snap = vm.snapshots?.get('before-upgrade') ?? new Map<string, string>();
      snap.set(r.key, value);
      vm.snapshots?.set('before-upgrade', snap);
    }
  }
  if (w.helper !== 'none') {
    const vm = f.addVm({
      vmid: CTRL,
      name: w.helper === 'foreign' ? 'db-9999' : MOVER_VM_NAME,
      node: NODE,
      running: false,
    });
    vm.config.delete('scsi0');
    if (w.helper === 'ours-holding' || w.helper === 'foreign') vm.config.set('unused0', `${STORAGE}:${w.helperDisk}`);
  }
  return f;
}

interface Picture {
  volumes: Map<string, number>;
  target: Set<string>;
  vms: Map<number, string>;
}
const picture = (f: FakeMoverProxmox): Picture => ({
  volumes: new Map(f.storageOf(NODE, STORAGE).volumes),
  target: new Set(f.storageOf(TARGET, STORAGE).volumes.keys()),
  vms: new Map(
    [...f.vms.values()].map((v) => [
      v.vmid,
      JSON.stringify([
        v.node,
        [...v.config],
        [...v.pending],
        [...(v.snapshots ?? new Map<string, Map<string, string>>())].map(([n, s]) => [n, [...s]]),
      ]),
    ]),
  ),
});

const VOLUME_KEY_RE = /^(?:ide|sata|scsi|virtio|efidisk|tpmstate|unused)\d+$|^vmstate$/;
const diskOf = (value: string) => {
  const first = value.split(',')[0] ?? '';
  return first.startsWith(`${STORAGE}:`) ? first.slice(STORAGE.length + 1) : undefined;
};
/** Every reference to the disk before the step, as `vmid/key/where`. */
function refsOf(f: FakeMoverProxmox, disk: string): string[] {
  const out: string[] = [];
  for (const vm of f.vms.values()) {
    const add = (m: Map<string, string>, where: string) => {
      for (const [key, value] of m)
        if (VOLUME_KEY_RE.test(key) && diskOf(value) === disk) out.push(`${vm.vmid}/${key}/${where}`);
    };
    add(vm.config, 'config');
    add(vm.pending, 'pending');
    for (const s of vm.snapshots?.values() ?? []) add(s, 'snapshot');
  }
  return out;
}
const baseOf = (disk: string) => disk.split(/[_+]vac/)[0] ?? disk;
const ours = (disk: string) => driverDisk(baseOf(disk));

function violations(f: FakeMoverProxmox, before: Picture, refs: Map<string, string[]>, w: World, op: Op): string[] {
  const after = picture(f);
  const bad: string[] = [];
  const helperOurs = w.helper !== 'foreign';
  for (const [disk] of before.volumes) {
    if (after.volumes.has(disk)) continue;
    const moved = after.target.has(disk) && !before.target.has(disk);
    const why = `${moved ? 'migrated' : 'freed'} ${disk}`;
    const r = refs.get(disk) ?? [];
    if (!ours(disk)) bad.push(`${why}: not the driver's`);
    if (op.kind !== 'delete-volume' && disk !== op.disk) bad.push(`${why}: not the step's target ${op.disk}`);
    if (op.kind === 'delete-volume' && baseOf(disk) !== op.disk) bad.push(`${why}: neither ${op.disk} nor its marker`);
    if (['delete-volume', 'free-marker'].includes(op.kind) && w.pvs.some((p) => baseOf(p) === baseOf(disk)))
      bad.push(`${why}: a PV names it`);
    const allowed = (x: string) =>
      (op.kind === 'migrate' || op.kind === 'release') && helperOurs && /^9999\/unused\d+\/config$/.test(x);
    const blocking = r.filter((x) => !allowed(x) && !(op.kind === 'delete-volume' && /\/scsi\d+\/config$/.test(x)));
    if (blocking.length) bad.push(`${why}: referenced before the step (${blocking.join(', ')})`);
  }
  for (const [vmid, was] of before.vms) {
    const now = after.vms.get(vmid);
    if (now === was) continue;
    if (vmid === CTRL && helperOurs && ['hold', 'migrate', 'release'].includes(op.kind)) continue;
    // DeleteVolume unlinks a helper leftover of its disk first (the controller's rule).
    if (op.kind === 'delete-volume' && now !== undefined) continue;
    bad.push(`VM ${vmid} ${now === undefined ? 'destroyed' : 'changed'} by ${op.kind}`);
  }
  for (const [vmid] of after.vms)
    if (!before.vms.has(vmid) && !(vmid === CTRL && op.kind === 'hold')) bad.push(`VM ${vmid} made`);
  return bad;
}

async function step(f: FakeMoverProxmox, w: World, op: Op): Promise<void> {
  const log = pino({ level: 'silent' });
  const cluster = new Cluster(REGION, f, log, { queue: { confirmTimeoutMs: 200 } });
  const core = { clusters: new Map([[REGION, cluster]]), defaultRegion: REGION, controllerVmId: CTRL, log };
  const pvs = w.pvs.map((d, i) => ({
    metadata: { name: `pv-${i}` },
    spec: { csi: { driver: 'csi.proxmox.sinextra.dev', volumeHandle: handleOf(d) } },
  }));
  const kube = { listPersistentVolumes: () => Promise.resolve(pvs) } as unknown as KubeApi;
  const ctx = {
    core,
    kube,
    stores: {} as NfsStores,
    nfs: { classes: [], addresses: new Map() },
    log,
    signal: AbortSignal.timeout(5_000),
  };
  const mover = new MoverVm({ api: f, cluster: REGION, vmid: CTRL });
  const volid = `${STORAGE}:${op.disk}`;
  switch (op.kind) {
    case 'delete-volume':
      await runAction(ctx, { type: 'delete-volume', region: REGION, volumeId: handleOf(op.disk) });
      return;
    case 'free-marker':
      await runAction(ctx, { type: 'free-marker', region: REGION, node: NODE, storage: STORAGE, volid });
      return;
    case 'hold':
      await mover.hold(NODE, volid);
      return;
    case 'migrate':
      await mover.finishMigration(await mover.startMigration(NODE, TARGET, volid), NODE);
      return;
    case 'release':
      await mover.release(volid);
      return;
    case 'free-source':
      await mover.freeSourceCopy(volid, NODE, {
        region: REGION,
        pvHandles: pvs.map((p) => ({ pv: p.metadata.name, handle: p.spec.csi.volumeHandle })),
        zone: NODE,
      });
  }
}

t.test('day-2 paths free, migrate and change only what is provably the driver’s', async (t) => {
  const { seed, numRuns } = pbtSettings(200);
  const count = { cases: 0, steps: 0, acted: 0 };
  const started = Date.now();
  await fc.assert(
    fc.asyncProperty(worldArb, fc.array(opArb, { minLength: 1, maxLength: 4 }), async (w, ops) => {
      count.cases++;
      const f = build(w);
      for (const op of ops) {
        count.steps++;
        const before = picture(f);
        const refs = new Map([...before.volumes.keys()].map((d) => [d, refsOf(f, d)]));
        await step(f, w, op).catch(() => undefined);
        const bad = violations(f, before, refs, w, op);
        if (bad.length) throw new Error(`${op.kind} ${op.disk}: ${bad.join('; ')}`);
        if (JSON.stringify([...picture(f).volumes]) !== JSON.stringify([...before.volumes])) count.acted++;
      }
    }),
    { seed, numRuns },
  );
  t.comment(
    `day-2 search: seed ${seed}, ${count.cases} cases, ${count.steps} steps, ${count.acted} that freed or moved a volume (${Date.now() - started} ms); replay: PBT_SEED=${seed} PBT_RUNS=${numRuns}`,
  );
  t.ok(count.acted > 0, 'the search reaches frees and migrations');
});

t.test('a released helper is destroyed, the disk it carried kept', async (t) => {
  const f = build({
    spec: { vms: [], disks: [{ disk: 'vm-9999-pvc-a', gib: 1 }], refs: [] },
    markers: [],
    pvs: [],
    markerRefs: [],
    helper: 'none',
    helperDisk: 'vm-9999-pvc-a',
  });
  const mover = new MoverVm({ api: f, cluster: REGION, vmid: CTRL });
  await mover.hold(NODE, `${STORAGE}:vm-9999-pvc-a`);
  await mover.finishMigration(await mover.startMigration(NODE, TARGET, `${STORAGE}:vm-9999-pvc-a`), NODE);
  await mover.release(`${STORAGE}:vm-9999-pvc-a`);
  t.notOk(f.vms.has(CTRL), 'the helper is gone');
  t.ok(f.storageOf(TARGET, STORAGE).volumes.has('vm-9999-pvc-a'), 'the disk is on the target');
});
