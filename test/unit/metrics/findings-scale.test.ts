// The findings refresh at 10,000 NFS claims, in the heap the image gives V8 under the chart's
// default memory limit, while CSI-like work waits on the event loop: the refresh completes (no
// "JavaScript heap out of memory", which killed the controller pod and crash-looped it), and it
// hands the event loop back between slices. Pinned by what it must do (complete within the
// heap; at least one turn per 256 judged directories), with one generous timing bound: at p99 a turn
// of the event loop waits under a second (CreateVolume's p99 goal while a refresh runs).
// The refresh runs in a child started with the heap flags the entrypoint derives from the limit.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setImmediate as turn } from 'node:timers/promises';
import pino from 'pino';
import { findingsMetrics } from '../../../src/metrics/findings.js';
import type { NfsStores } from '../../../src/nfs/controller/store/store.js';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '../../../src/k8s/index.js';
import { FakeStores } from '../nfs/controller/fake-store.js';
import { NSPV, kube, nfsClass } from '../cli/day2-fixtures.js';

const CLAIMS = Number(process.env.FINDINGS_SCALE_CLAIMS ?? 10_000);
const SERVER = '127.0.0.1';
const SHARE = '/export';

/** Stores whose every call goes over the event loop once, as a network round trip does. */
function networked(f: FakeStores): NfsStores {
  const wrap = <T extends object>(o: T): T =>
    new Proxy(o, {
      get(target, key, receiver) {
        const v: unknown = Reflect.get(target, key, receiver);
        if (typeof v !== 'function') return v;
        return async (...args: unknown[]) => {
          await turn();
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
  return new Proxy(f, {
    get: (target, key, receiver) =>
      key === 'open'
        ? (server: string, share: string) => wrap(target.open(server, share))
        : (Reflect.get(target, key, receiver) as unknown),
  });
}

/** A PV and its claim as the API server lists them (status, claimRef, labels and all). */
function objects(i: number): { pv: V1PersistentVolume; pvc: V1PersistentVolumeClaim; dir: string } {
  const uid = `0b1c2d3e-4f50-4617-8293-${i.toString(16).padStart(12, '0')}`;
  const name = `pvc-${uid}`;
  const ns = `team-${i % 50}`;
  const dir = `${ns}/${name}`;
  const meta = { creationTimestamp: new Date('2026-11-01T00:00:00Z'), resourceVersion: String(100000 + i), uid };
  return {
    dir,
    pv: {
      metadata: {
        name,
        ...meta,
        annotations: { 'pv.kubernetes.io/provisioned-by': 'nfs.csi.k8s.io' },
        finalizers: ['kubernetes.io/pv-protection'],
      },
      spec: {
        accessModes: ['ReadWriteMany'],
        capacity: { storage: '1Gi' },
        claimRef: { kind: 'PersistentVolumeClaim', namespace: ns, name: `data-${i}`, uid },
        csi: {
          driver: 'nfs.csi.k8s.io',
          volumeHandle: `${SERVER}#export#${dir}#${name}#`,
          volumeAttributes: { server: SERVER, share: SHARE, subdir: dir, 'csi.storage.k8s.io/pv/name': name },
        },
        persistentVolumeReclaimPolicy: 'Delete',
        storageClassName: 'nfs',
        volumeMode: 'Filesystem',
      },
      status: { phase: 'Bound' },
    },
    pvc: {
      metadata: { name: `data-${i}`, namespace: ns, ...meta, labels: { app: `app-${i % 200}` } },
      spec: { accessModes: ['ReadWriteMany'], resources: { requests: { storage: '1Gi' } }, volumeName: name },
      status: { phase: 'Bound', capacity: { storage: '1Gi' } },
    },
  };
}

async function child(): Promise<void> {
  const fake = new FakeStores();
  fake.put(SERVER, SHARE);
  for (let i = 0; i < CLAIMS; i++) fake.put(SERVER, `${SHARE}/${objects(i).dir}`);
  // The lists as the API server answers them: new objects at every refresh, not held between,
  // a page of 500 at a time (findings-kube.ts reads them so).
  const lists = async () => {
    const pvs: V1PersistentVolume[] = [];
    const pvcs: V1PersistentVolumeClaim[] = [];
    for (let i = 0; i < CLAIMS; i++) {
      if (i % 500 === 0) await turn();
      const o = objects(i);
      // One claim in a hundred has lost its PV: those are findings.
      if (i % 100 !== 0) pvs.push(o.pv);
      pvcs.push(o.pvc);
    }
    return kube({ pvs, pvcs, classes: [nfsClass('nfs', SHARE, NSPV, 'delete')] });
  };
  const m = findingsMetrics({
    kube: lists,
    stores: networked(fake),
    log: pino({ level: 'silent' }),
    intervalMs: 60_000,
    callsPerMinute: 30,
  });
  (globalThis as { gc?: () => void }).gc?.();
  const base = process.memoryUsage().heapUsed;
  const waits: number[] = [];
  let heapPeak = 0;
  const refreshing = { on: true };
  // What a CSI call sees: how long each turn of the event loop waits for the refresh.
  const ticker = (async () => {
    while (refreshing.on) {
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, 1));
      waits.push(performance.now() - t0);
      if (waits.length % 20 === 0) heapPeak = Math.max(heapPeak, process.memoryUsage().heapUsed);
    }
  })();
  const started = performance.now();
  await m.refresh();
  const refreshMs = performance.now() - started;
  refreshing.on = false;
  await ticker;
  const orphans = m.snapshot().find((s) => s.name === 'pve_csi_findings' && s.labels.kind === 'orphan-dir')?.value;
  process.stdout.write(
    JSON.stringify({
      baseMiB: base / 2 ** 20,
      refreshMs,
      turns: waits.length,
      p99WaitMs: waits.sort((a, b) => a - b)[Math.floor(waits.length * 0.99)] ?? 0,
      maxWaitMs: waits.at(-1) ?? 0,
      heapPeakMiB: heapPeak / 2 ** 20,
      orphans,
    }) + '\n',
  );
}

/** The old space the image's entrypoint gives V8 under the chart's controller memory limit. */
function chartHeapMiB(): number {
  const values = readFileSync(new URL('../../../charts/pve-nfs-csi/values.yaml', import.meta.url), 'utf8');
  const limit = /^controller:[\s\S]*?\n {2}resources:\n[\s\S]*?limits: \{memory: (\d+)Mi\}/m.exec(values)?.[1];
  const entry = readFileSync(new URL('../../../image/entrypoint.sh', import.meta.url), 'utf8');
  const reserve = /heap=\$\(\( \(limit \/ 1048576 - (\d+)\) \/ 2 \)\)/.exec(entry)?.[1];
  if (!limit || !reserve) throw new Error('cannot read the chart limit or the entrypoint formula');
  return Math.max(16, Math.floor((Number(limit) - Number(reserve)) / 2));
}

if (process.env.FINDINGS_SCALE_CHILD) await child();
else
  t.test(`a findings refresh of ${CLAIMS} NFS claims in the chart's heap`, async (t) => {
    const heap = chartHeapMiB();
    const out = execFileSync(
      process.execPath,
      [`--max-old-space-size=${heap}`, '--max-semi-space-size=1', '--import', 'tsx', fileURLToPath(import.meta.url)],
      { env: { ...process.env, FINDINGS_SCALE_CHILD: '1' }, encoding: 'utf8', timeout: 300_000 },
    );
    const r = JSON.parse(out.trim().split('\n').at(-1) ?? '{}') as {
      baseMiB: number;
      refreshMs: number;
      turns: number;
      p99WaitMs: number;
      maxWaitMs: number;
      heapPeakMiB: number;
      orphans: number;
    };
    t.comment(
      `refresh ${(r.refreshMs / 1000).toFixed(1)} s; old space ${heap} MiB; heap ${r.baseMiB.toFixed(1)} MiB before, peak ${r.heapPeakMiB.toFixed(1)} MiB; ` +
        `turn waits p99 ${r.p99WaitMs.toFixed(0)} ms, longest ${r.maxWaitMs.toFixed(0)} ms`,
    );
    t.equal(r.orphans, CLAIMS / 100, 'the refresh completed and found the claims without a PV');
    // What the refresh adds to the heap, plus what a serving controller holds (under 16 MiB;
    // the test runner's own modules are the rest of `before`), fits the old space twice over.
    const added = r.heapPeakMiB - r.baseMiB;
    t.ok(added + 16 <= heap / 2, `the refresh adds ${added.toFixed(1)} MiB: the old space is twice that and more`);
    t.ok(r.turns >= CLAIMS / 256, `the event loop turned ${r.turns} times during the refresh`);
    t.ok(r.p99WaitMs < 1000, `a call waits under a second at p99 (${r.p99WaitMs.toFixed(0)} ms)`);
  });
