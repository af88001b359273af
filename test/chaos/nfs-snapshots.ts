// Scenario 7, NFS snapshots under kill -9: against the suite's nfs-ganesha, the NFS controller is
// killed with SIGKILL at a random point of CreateSnapshot copies, of restores (CreateVolume from a
// snapshot) and of clones (CreateVolume from a volume) — when the copies on the server hold a
// random share of the source's entries (seeded and printed; CHAOS_SEED replays a run) — started again, and
// every request replayed until it has its answer. The replay must converge: the handles of the
// first OK answers; every snapshot, restored and cloned claim equal to its source at snapshot
// (clone) time in content, mode, owner, times, symlinks and hard links (docs/snapshots.md, "What
// a copy keeps"); no partial copy and no restore record left once the retries answered. One more
// snapshot and one more restore per batch are given up after the kill (their VolumeSnapshot and
// PVC deleted): what they left is for `report --fix`, which must find it, remove it through the
// gate, and then find nothing but the snapshots. Last, deletes under a kill leave the share empty.
import fs from 'node:fs';
import path from 'node:path';
import { pino, type Logger } from 'pino';
import type { V1PersistentVolume, V1StorageClass, KubeApi } from '../../src/k8s/index.js';
import { nfsClasses, readNfs, type KubeFacts } from '../../src/cli/report/facts.js';
import { runAction } from '../../src/cli/report/fix.js';
import type { Finding } from '../../src/cli/report/findings.js';
import { nfsFindings } from '../../src/cli/report/nfs-findings.js';
import { createNfsStores } from '../../src/nfs/controller/store/stores.js';
import type { EntryMeta } from '../integration/nfs/tree-meta.js';
import { SINGLE_WRITER, type ChaosEnv } from './env.js';
import { sharedGanesha, type NfsShared } from './nfs.js';
import { buildSource, changeSource, countEntries, differences, manifest } from './nfs-trees.js';
import { Program } from './program.js';
import { CsiCaller, Recorder, field, sleep, volumeIdOf, type Answer } from './rpc.js';

/** mulberry32: a small seeded generator, so a run's kill points can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const RECORD_RE = /^v1,\d+,\d+,/;
const enc = (s: string) => encodeURIComponent(s).replace(/^\./, '%2E');

export async function nfsSnapshotScenario(env: ChaosEnv, shared: NfsShared): Promise<Recorder> {
  const rec = new Recorder('7 NFS kill -9 in snapshots + restores + clones');
  // Bounded runs repeat one run (as the other scenarios' seeded faults do); --long draws new points.
  const seed = process.env.CHAOS_SEED ? Number(process.env.CHAOS_SEED) : env.long ? Date.now() % 1_000_000 : 7;
  console.log(`    kill points: CHAOS_SEED=${seed}`);
  const random = rng(seed);
  const uid = () =>
    Array.from({ length: 32 }, () => Math.floor(random() * 16).toString(16))
      .join('')
      .replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5');
  const g = await sharedGanesha(shared);
  // A share of its own beside the other scenarios' talos/, so their audits and this one's never meet.
  const onDisk = path.join(g.exportDir, 'snaps');
  fs.rmSync(onDisk, { recursive: true, force: true });
  fs.mkdirSync(onDisk);
  const share = `${g.share}/snaps`;
  const sock = path.join(env.runDir, 'nfs-snap.sock');
  const prog = new Program({
    name: 'nfs-snap-controller',
    runDir: env.runDir,
    args: [
      '--mode',
      'controller',
      '--nfs-endpoint',
      `unix://${sock}`,
      '--nfs-port',
      String(g.nfsPort),
      '--nfs-mount-port',
      String(g.mountPort),
      '--nfs-call-timeout',
      '2s',
    ],
  });
  await prog.start();
  const csi = new CsiCaller(`unix://${sock}`, rec);
  const log = pino({ level: 'silent' });
  const stores = createNfsStores({
    timeoutMs: 5000,
    nfsPort: g.nfsPort,
    mountPort: g.mountPort,
    privilegedPort: true,
    log,
  });
  const opts = { deadlineMs: 15_000, budgetMs: 60_000, backoffStartMs: 100, backoffMaxMs: 1000 };
  const n = env.long ? 4 : 2;
  const params = { server: g.server, share, onDelete: 'delete' };
  const volReq = (name: string, source?: object) => ({
    name,
    volumeCapabilities: [SINGLE_WRITER],
    capacityRange: { requiredBytes: String(1 << 30) },
    parameters: params,
    ...(source && { volumeContentSource: source }),
  });
  const snapId = (a: Answer) => {
    const id = field(a.res, 'snapshot', 'snapshotId');
    return typeof id === 'string' ? id : '';
  };
  const snapTree = (name: string) => path.join(onDisk, '.snapshots', enc(name), 'tree');
  const markers = () =>
    fs.existsSync(path.join(onDisk, '.snapshots'))
      ? fs.readdirSync(path.join(onDisk, '.snapshots')).filter((e) => e.startsWith('.restore-'))
      : [];
  const expectEqual = async (what: string, dir: string, want: readonly EntryMeta[]) => {
    if (!fs.existsSync(dir)) {
      rec.violate(`${what}: ${dir} does not exist`);
      return;
    }
    const diff = differences(want, await manifest(dir));
    if (diff.length) rec.violate(`${what} differs from its source: ${diff.join('; ')}`);
  };

  /**
   * The batch (`keep` replayed to OK, `abandon` tried once), a kill -9 once the copies on the
   * server (`progress`) reached a random share of `total`, a restart, the replay; the answers of
   * `keep`'s replay, checked against its first OK answers with `id`.
   */
  const storm = async (
    what: string,
    keep: Array<() => Promise<Answer>>,
    abandon: Array<() => Promise<Answer>>,
    progress: () => number,
    total: number,
    id: (a: Answer) => string,
  ): Promise<{ replay: Answer[]; abandoned: Answer[] }> => {
    const frac = 0.05 + random() * 0.85;
    const want = Math.max(1, Math.floor(frac * total));
    const all = keep.length + abandon.length;
    const first = Promise.all(keep.map((c) => c()));
    const given = Promise.all(abandon.map((c) => c()));
    const t0 = Date.now();
    while (progress() < want && rec.inflight >= all && Date.now() - t0 < 20_000) await sleep(2);
    const cut = rec.inflight;
    const at = progress();
    await prog.kill9();
    rec.fault('kill-9');
    rec.fault('calls cut', cut);
    console.log(
      `    ${what}: kill -9 at ${at} of ${total} entries (planned ${want}), ${cut} of ${all} calls in flight`,
    );
    if (cut === 0) rec.violate(`${what}: the kill (planned at ${want} entries) cut no call`);
    await sleep(100);
    await prog.start();
    const [firstAnswers, abandoned] = await Promise.all([first, given]);
    const replay = await Promise.all(keep.map((c) => c()));
    replay.forEach((a, i) => {
      if (a.code !== 'OK') rec.violate(`${what} #${i}: final answer ${a.code} ${a.message.slice(0, 200)}`);
      const was = firstAnswers[i];
      if (was?.code === 'OK' && a.code === 'OK' && id(was) !== id(a))
        rec.violate(`${what} #${i}: the retry answered ${id(a)}, the first answer was ${id(was)}`);
    });
    return { replay, abandoned };
  };

  // The snapshot given up has a source of its own: two snapshots of one volume wait for each other.
  const sources = Array.from({ length: n + 1 }, () => `pvc-${uid()}`);
  const restores = Array.from({ length: n }, () => `pvc-${uid()}`);
  const clones = Array.from({ length: n }, () => `pvc-${uid()}`);
  const lostRestore = `pvc-${uid()}`;
  const snapNames = Array.from({ length: n }, () => `snapshot-${uid()}`);
  const lostSnap = `snapshot-${uid()}`;
  const ids = new Map<string, string>();
  const live = new Set<string>();
  const once = { deadlineMs: 15_000 };
  try {
    for (const name of sources) {
      const a = await csi.op('controller', 'CreateVolume', volReq(name), opts);
      if (a.code !== 'OK') rec.violate(`CreateVolume ${name}: ${a.code} ${a.message}`);
      else ids.set(name, volumeIdOf(a));
      live.add(name);
      await buildSource(path.join(onDisk, name));
    }
    const atSnapshot = await Promise.all(sources.map((s) => manifest(path.join(onDisk, s))));
    const total = atSnapshot[0]?.length ?? 1;

    // Snapshots: a copy of every entry into .snapshots/<name>/tree, then the completion record.
    const snapCall = (name: string, src: string) => () =>
      csi.op('controller', 'CreateSnapshot', { name, sourceVolumeId: ids.get(src) ?? '' }, opts);
    const snaps = await storm(
      'CreateSnapshot',
      snapNames.map((s, i) => snapCall(s, sources[i] ?? '')),
      [
        () =>
          csi.once('controller', 'CreateSnapshot', { name: lostSnap, sourceVolumeId: ids.get(sources[n] ?? '') }, once),
      ],
      () => [...snapNames, lostSnap].reduce((a, s) => a + countEntries(snapTree(s)), 0),
      total * (n + 1),
      snapId,
    );
    // The VolumeSnapshot given up was deleted: DeleteSnapshot when it had a handle, else nothing.
    const lostSnapId = snaps.abandoned[0]?.code === 'OK' ? snapId(snaps.abandoned[0]) : '';
    if (lostSnapId) await csi.op('controller', 'DeleteSnapshot', { snapshotId: lostSnapId }, { ...opts, until: 'ok' });
    const snapIds = snaps.replay.map(snapId);
    for (const [i, name] of snapNames.entries()) {
      const dir = path.join(onDisk, '.snapshots', enc(name));
      const entries = fs.existsSync(dir) ? fs.readdirSync(dir).sort() : [];
      if (entries.length !== 2 || !entries.includes('tree') || !entries.some((e) => RECORD_RE.test(e)))
        rec.violate(`snapshot ${name}: holds [${entries.join(', ')}] (want its completion record and tree)`);
      await expectEqual(`snapshot ${name}`, snapTree(name), atSnapshot[i] ?? []);
    }
    if (markers().length) rec.violate(`restore records after the snapshots: ${markers().join(', ')}`);

    // What a pod writes after the snapshots: restores must not see it, clones must.
    for (const s of sources) changeSource(path.join(onDisk, s));
    const atClone = await Promise.all(sources.map((s) => manifest(path.join(onDisk, s))));

    const restoreCall = (name: string, snapshotId: string) => async () => {
      const a = await csi.op('controller', 'CreateVolume', volReq(name, { snapshot: { snapshotId } }), opts);
      if (a.code === 'OK') ids.set(name, volumeIdOf(a));
      return a;
    };
    const restored = await storm(
      'restore',
      restores.map((r, i) => restoreCall(r, snapIds[i] ?? '')),
      [
        () =>
          csi.once(
            'controller',
            'CreateVolume',
            volReq(lostRestore, { snapshot: { snapshotId: snapIds[0] ?? '' } }),
            once,
          ),
      ],
      () => [...restores, lostRestore].reduce((a, r) => a + countEntries(path.join(onDisk, r)), 0),
      total * (n + 1),
      volumeIdOf,
    );
    restores.forEach((r) => live.add(r));
    // The PVC given up was deleted: DeleteVolume when a PV was made, else its leftovers are report's.
    if (restored.abandoned[0]?.code === 'OK')
      await csi.op(
        'controller',
        'DeleteVolume',
        { volumeId: volumeIdOf(restored.abandoned[0]) },
        { ...opts, until: 'ok' },
      );
    for (const [i, r] of restores.entries())
      await expectEqual(`restore ${r} of ${snapNames[i]}`, path.join(onDisk, r), atSnapshot[i] ?? []);
    // The given-up restore's record (.restore-<claim>@<name>@<source>) is report's to remove.
    const lostMarker = `.restore-${encodeURIComponent(lostRestore)}@`;
    const isLost = (m: string) => m.startsWith(lostMarker);
    const stray = markers().filter((m) => !isLost(m));
    if (stray.length) rec.violate(`restore records left after the restores answered: ${stray.join(', ')}`);

    const cloneCall = (name: string, src: string) => async () => {
      const a = await csi.op('controller', 'CreateVolume', volReq(name, { volume: { volumeId: ids.get(src) } }), opts);
      if (a.code === 'OK') ids.set(name, volumeIdOf(a));
      return a;
    };
    await storm(
      'clone',
      clones.map((c, i) => cloneCall(c, sources[i] ?? '')),
      [],
      () => clones.reduce((a, c) => a + countEntries(path.join(onDisk, c)), 0),
      total * n,
      volumeIdOf,
    );
    clones.forEach((c) => live.add(c));
    for (const [i, c] of clones.entries())
      await expectEqual(`clone ${c} of ${sources[i]}`, path.join(onDisk, c), atClone[i] ?? []);
    const left = markers().filter((m) => !isLost(m));
    if (left.length) rec.violate(`restore records left after the clones answered: ${left.join(', ')}`);

    await reportConverges(rec, { stores, log, server: g.server, share, live, ids, snapNames });

    // Deletes under a kill: every snapshot and volume, replayed until OK; then the share is empty.
    const until = { ...opts, until: 'ok' as const };
    const before = countEntries(onDisk);
    await storm(
      'DeleteSnapshot + DeleteVolume',
      [
        ...snapIds.map((snapshotId) => () => csi.op('controller', 'DeleteSnapshot', { snapshotId }, until)),
        ...[...live].map((name) => () => csi.op('controller', 'DeleteVolume', { volumeId: ids.get(name) }, until)),
      ],
      [],
      () => before - countEntries(onDisk),
      before,
      () => '',
    );
    const rest = fs
      .readdirSync(onDisk)
      .flatMap((e) => (e === '.snapshots' ? fs.readdirSync(path.join(onDisk, e)).map((x) => `${e}/${x}`) : [e]));
    if (rest.length) rec.violate(`leak: the share holds ${rest.join(', ')} after every delete answered OK`);
    live.clear();
    await reportConverges(rec, { stores, log, server: g.server, share, live, ids, snapNames: [] });
  } finally {
    csi.close();
    await prog.stop();
    await stores.close();
  }
  return rec;
}

/**
 * `report` over the share with a PV for every live volume (the library layer report and the
 * findings metrics run): every leftover it lists is removed by `report --fix`'s actions, listed
 * again until nothing is left to do (a restore record is a leftover only once its claim is gone),
 * and then the only findings are the snapshots that exist.
 */
async function reportConverges(
  rec: Recorder,
  c: {
    stores: ReturnType<typeof createNfsStores>;
    log: Logger;
    server: string;
    share: string;
    live: ReadonlySet<string>;
    ids: ReadonlyMap<string, string>;
    snapNames: readonly string[];
  },
): Promise<void> {
  const sc: V1StorageClass = {
    metadata: { name: 'nfs-chaos' },
    provisioner: 'nfs.csi.k8s.io',
    parameters: { server: c.server, share: c.share, onDelete: 'delete' },
  };
  const pvs: V1PersistentVolume[] = [...c.live].map((name) => ({
    metadata: { name },
    spec: { csi: { driver: 'nfs.csi.k8s.io', volumeHandle: c.ids.get(name) ?? '' } },
  }));
  const k: KubeFacts = { pvs, pvcs: [], attachments: [], classes: [sc], birth: Date.now() - 3_600_000 };
  const graceMs = 1_000;
  const fixCtx = {
    core: {} as never,
    kube: { listPersistentVolumes: () => Promise.resolve(pvs) } as unknown as KubeApi,
    stores: c.stores,
    nfs: { classes: nfsClasses(k.classes), addresses: new Map([[c.server, [c.server]]]) },
    log: c.log,
    signal: AbortSignal.timeout(60_000),
  };
  let found: Finding[] = [];
  for (let pass = 1; pass <= 4; pass++) {
    await sleep(graceMs + 100); // what the kills left is past the grace period now
    const facts = await readNfs(nfsClasses(k.classes), pvs, c.stores, { signal: fixCtx.signal, sizes: false });
    found = nfsFindings(facts, k, { controllerVmId: 9999, graceMs, now: Date.now() });
    const actions = found.flatMap((f) => (f.action ? [{ f, a: f.action }] : []));
    if (actions.length === 0) break;
    for (const { f, a } of actions) {
      rec.fault(`report --fix: ${f.kind}`);
      const r = await runAction(fixCtx, a).catch((e: unknown) => `failed: ${(e as Error).message}`);
      if (r.startsWith('failed')) rec.violate(`report --fix ${f.kind} ${f.what}: ${r}`);
    }
  }
  const want = new Set(c.snapNames.map((s) => `.snapshots/${enc(s)}`));
  for (const f of found) {
    if (f.kind === 'nfs-snapshot' && want.delete(f.what)) continue;
    rec.violate(`report: ${f.kind} ${f.where} ${f.what}: ${f.detail}${f.kept ? ` (kept: ${f.kept})` : ''}`);
  }
  for (const w of want) rec.violate(`report does not list the snapshot ${w}`);
}
