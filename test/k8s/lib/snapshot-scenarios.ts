// The k8s tier's snapshot scenarios, for both classes: csi-snapshotter before and after the
// CRDs exist; VolumeSnapshot -> ReadyToUse -> a claim from it holding the source's data at
// snapshot time, the snapshot outliving its source claim; a clone of a claim; and VolSync's
// copyMethod: Snapshot (snapshot with the default class, restore to a temporary claim, mount it
// in a mover pod, compare, clean up). Both drivers advertise snapshots and clones, so a driver
// that stops advertising what a scenario needs fails the tier rather than skipping it.
import fs from 'node:fs';
import type { Test } from 'tap';
import type { Proc } from '../../harness/procs.js';
import { present } from '../../helpers/present.js';
import { render, type K8sObject } from './chart.js';
import { KUBE_VERSION, NFS_DRIVER, NS, PROXMOX_DRIVER, type Env } from './env.js';
import type { PersistentVolume } from './objects.js';
import {
  contentPath,
  createSnapshot,
  fromClaim,
  fromSnapshot,
  installSnapshotCrds,
  snapshotPath,
  startSnapshotController,
  waitSnapshotReady,
} from './snapshots.js';
import {
  attachedDevice,
  changeTree,
  expectedDisk,
  nfsDir,
  readDisk,
  readTree,
  writeDisk,
  writeTree,
} from './volume-data.js';
import { GiB, createPvc, deletePod, placePod, pvcPath, waitBound, type ClaimSpec } from './workload.js';

interface ClassCase {
  key: 'proxmox' | 'nfs';
  driver: string;
  storageClass: string;
  /** Where its pods run (Proxmox disks attach there). */
  node: string;
}
const CASES: ClassCase[] = [
  { key: 'proxmox', driver: PROXMOX_DRIVER, storageClass: 'proxmox-local', node: 'talos-worker-2' },
  { key: 'nfs', driver: NFS_DRIVER, storageClass: 'syno-nfs-csi', node: 'talos-worker-3' },
];

/** A claim in use by a pod, with what its workload writes and reads. */
interface Claim {
  name: string;
  pv: PersistentVolume;
  write(seed: string): void;
  /** A fingerprint of the data: per-region hashes of a disk, or the whole tree of a directory. */
  read(): unknown;
  /** Changes the data after a snapshot or clone. */
  change(): void;
  /** For a disk: what read() gives after write(seed), to check the write landed. */
  expected?(seed: string): unknown;
  /** Deletes the pod and the claim, and waits until the volume is deleted. */
  remove(): Promise<void>;
}

async function claim(env: Env, c: ClassCase, name: string, extra: ClaimSpec = {}, size = '1Gi'): Promise<Claim> {
  await createPvc(env, name, c.storageClass, size, extra);
  // The pod that mounts it; for WaitForFirstConsumer (Proxmox) it is also what provisions it.
  await placePod(env, name, [name], c.node);
  const { pv } = await waitBound(env, name, 120_000);
  const remove = async () => {
    await deletePod(env, name);
    await env.kube.delete(pvcPath(name));
    await env.kube.waitGone(
      `/api/v1/persistentvolumes/${pv.metadata.name}`,
      `PV of ${name} deleted`,
      90_000,
      env.sidecarErrors,
    );
  };
  if (c.key === 'nfs') {
    const dir = nfsDir(env, name);
    return {
      name,
      pv,
      write: (seed) => writeTree(dir, seed),
      read: () => readTree(dir),
      change: () => changeTree(dir),
      remove,
    };
  }
  const dev = await attachedDevice(env, pv, c.node);
  return {
    name,
    pv,
    write: (seed) => writeDisk(dev, GiB, seed),
    read: () => readDisk(dev, GiB),
    change: () => writeDisk(dev, GiB, `${name}: after`),
    expected: (seed) => expectedDisk(GiB, seed),
    remove,
  };
}

/** Written and read back; for a disk, also checked against what was written. */
function written(t: Test, c: Claim, seed: string): unknown {
  c.write(seed);
  const data = c.read();
  if (c.expected) t.same(data, c.expected(seed), `${c.name}: the data landed on the disk`);
  return data;
}

function changed(t: Test, c: Claim, before: unknown): void {
  c.change();
  t.notSame(c.read(), before, `${c.name} changed after the copy was taken`);
}

/** The chart's class of the driver (values.yaml: <driver>.snapshots.volumeSnapshotClass.name). */
const snapshotClassOf = (c: ClassCase) => `${c.key}-snapshot`;
const hasCapability = (env: Env, c: ClassCase, cap: string) => (env.capabilities[c.driver] ?? []).includes(cap);
/** Asserts (on the parent test) that the driver advertises `cap`; the scenario runs either way. */
const requires = (t: Test, env: Env, c: ClassCase, cap: string) => {
  t.ok(hasCapability(env, c, cap), `${c.driver} advertises ${cap}`);
  return {};
};

/** The chart's VolumeSnapshotClasses, rendered with `<driver>.snapshots.volumeSnapshotClass.create`. */
function chartSnapshotClasses(env: Env): K8sObject[] {
  const values = structuredClone(env.values) as Record<string, Record<string, unknown>>;
  for (const key of ['proxmox', 'nfs'])
    values[key] = { ...values[key], snapshots: { enabled: true, volumeSnapshotClass: { create: true } } };
  return render({ values, namespace: NS, kubeVersion: KUBE_VERSION, dir: env.dir }).filter(
    (o) => o.kind === 'VolumeSnapshotClass',
  );
}

export function snapshotScenarios(t: Test, env: Env): void {
  const { kube } = env;
  const first = () => present(env.controllerPods[0], 'a controller pod');
  let controller: Proc | undefined;

  t.test(
    'csi-snapshotter waits for the CRDs without exiting; then CRDs, snapshot-controller, the chart classes',
    async (t) => {
      for (const c of CASES) {
        const proc = present(first().procs.get(`${c.key}-snapshotter`), `${c.key}-snapshotter`);
        const log = () => fs.readFileSync(proc.logFile, 'utf8');
        if (!hasCapability(env, c, 'CREATE_DELETE_SNAPSHOT')) {
          // What the sidecar does next to a driver without snapshots (and why both drivers must offer them).
          t.not(proc.child.exitCode, null, `${c.key}-snapshotter exited: its driver offers no snapshots`);
          t.match(log(), /does not support ControllerCreateSnapshot/, 'and said why');
          continue;
        }
        const end = Date.now() + 60_000;
        while (!/could not find the requested resource/.test(log()) && Date.now() < end)
          await new Promise((r) => setTimeout(r, 500));
        t.match(log(), /could not find the requested resource/, `${c.key}-snapshotter finds no VolumeSnapshot API yet`);
        t.equal(proc.child.exitCode, null, `${c.key}-snapshotter is still running without the CRDs`);
      }
      const crds = await installSnapshotCrds(kube, env.bins.SNAPSHOT_CRDS);
      t.same(crds.sort(), [
        'volumesnapshotclasses.snapshot.storage.k8s.io',
        'volumesnapshotcontents.snapshot.storage.k8s.io',
        'volumesnapshots.snapshot.storage.k8s.io',
      ]);
      controller = await startSnapshotController(env.cluster, env.bins.SNAPSHOT_CONTROLLER);
      env.cluster.procs.push(controller);
      const classes = chartSnapshotClasses(env);
      for (const o of classes) await kube.apply(o);
      t.same(
        classes.map((o) => [
          o.metadata.name,
          o.driver,
          o.deletionPolicy,
          o.metadata.annotations?.['snapshot.storage.kubernetes.io/is-default-class'],
        ]),
        [
          ['proxmox-snapshot', PROXMOX_DRIVER, 'Delete', 'true'],
          ['nfs-snapshot', NFS_DRIVER, 'Delete', 'true'],
        ],
        'one default class per driver, from the chart',
      );
    },
  );

  for (const c of CASES) {
    t.test(
      `${c.storageClass}: VolumeSnapshot -> ReadyToUse -> a claim from it holds the data of snapshot time; the snapshot outlives its source`,
      requires(t, env, c, 'CREATE_DELETE_SNAPSHOT'),
      async (t) => {
        const src = await claim(env, c, `snap-src-${c.key}`);
        const atSnapshot = written(t, src, `${c.key} snapshot`);
        const snap = `snap-${c.key}`;
        await createSnapshot(env, snap, src.name, snapshotClassOf(c));
        const { snapshot, content } = await waitSnapshotReady(env, snap);
        t.equal(content.spec.driver, c.driver, 'taken by its driver');
        t.equal(content.spec.deletionPolicy, 'Delete', "the class's deletionPolicy");
        const handle = present(content.status?.snapshotHandle, 'the snapshot handle');
        // What a restore needs: a disk's whole size; for a directory tree, what it holds (> 0 here).
        const restoreSize = Number(content.status?.restoreSize);
        t.ok(c.key === 'proxmox' ? restoreSize >= GiB : restoreSize > 0, `restoreSize ${restoreSize}`);
        t.ok(snapshot.status?.creationTime, 'a creation time');
        changed(t, src, atSnapshot);

        const restored = await claim(env, c, `snap-restore-${c.key}`, fromSnapshot(snap));
        t.same(restored.read(), atSnapshot, 'the restored claim holds the data of snapshot time');
        await restored.remove();

        // Deleting the source claim (and so its volume) leaves the snapshot, restorable.
        await src.remove();
        const after = await waitSnapshotReady(env, snap, 30_000);
        t.equal(
          after.content.status?.snapshotHandle,
          handle,
          'the snapshot is still there after its source was deleted',
        );
        const again = await claim(env, c, `snap-restore2-${c.key}`, fromSnapshot(snap));
        t.same(again.read(), atSnapshot, 'and restores the same data without its source');
        await again.remove();
        await kube.delete(snapshotPath(snap));
        await kube.waitGone(
          contentPath(content.metadata.name),
          'the VolumeSnapshotContent (Delete policy) to be gone',
          90_000,
          env.sidecarErrors,
        );
      },
    );

    t.test(
      `${c.storageClass}: a clone of a claim holds the source's data at clone time, and the two are independent`,
      requires(t, env, c, 'CLONE_VOLUME'),
      async (t) => {
        const src = await claim(env, c, `clone-src-${c.key}`);
        const atClone = written(t, src, `${c.key} clone`);
        const clone = await claim(env, c, `clone-${c.key}`, fromClaim(src.name));
        t.same(clone.read(), atClone, 'the clone holds the data of the source');
        changed(t, clone, atClone);
        t.same(src.read(), atClone, 'a write to the clone leaves the source as it was');
        await clone.remove();
        await src.remove();
      },
    );

    t.test(
      `${c.storageClass}: VolSync's copyMethod Snapshot: default class, restore, mount, compare, clean up`,
      requires(t, env, c, 'CREATE_DELETE_SNAPSHOT'),
      async (t) => {
        const src = await claim(env, c, `volsync-src-${c.key}`);
        const data = written(t, src, `${c.key} volsync`);
        // VolSync names no class unless told: the driver's default VolumeSnapshotClass applies.
        const snap = `volsync-${c.key}`;
        await createSnapshot(env, snap, src.name);
        const { snapshot, content } = await waitSnapshotReady(env, snap);
        t.equal(content.spec.driver, c.driver, "the default class of the source volume's driver");
        // VolSync's size for the temporary claim (volumehandler.go, pvcFromSnapshot, no capacity
        // set): the snapshot's restoreSize when it is not zero, else the source claim's capacity.
        const restoreSize = snapshot.status?.restoreSize;
        const size = restoreSize && !/^0+[A-Za-z]*$/.test(restoreSize) ? restoreSize : '1Gi';
        const mover = await claim(env, c, `volsync-tmp-${c.key}`, fromSnapshot(snap), size);
        t.same(mover.read(), data, "the mover pod's claim holds the source's data");
        await mover.remove();
        await kube.delete(snapshotPath(snap));
        await kube.waitGone(
          contentPath(content.metadata.name),
          'the snapshot to be deleted',
          90_000,
          env.sidecarErrors,
        );
        t.same(src.read(), data, 'the source is untouched');
        await src.remove();
      },
    );
  }

  t.test('snapshot-controller was refused nothing: the upstream RBAC it runs with is complete', async (t) => {
    const log = fs.readFileSync(present(controller, 'snapshot-controller').logFile, 'utf8');
    t.same(
      log.split('\n').filter((l) => /is forbidden/.test(l)),
      [],
      'no "forbidden" answers in its log',
    );
    t.equal(controller?.child.exitCode, null, 'still running');
  });
}
