// Property-based search: an id the NFS driver did not issue for exactly that object changes
// nothing (docs/ownership-nfs.md, "Every RPC and every id"). Over the in-memory NAS with the real
// controller and gate, each step draws its ids from the whole world as it is at that step —
// every directory below the share (claims, .snapshots and what is in it, restore and filled
// records, archives, csi-driver-nfs archive folders, data put there by hand), the handles and
// snapshot ids the driver answered, a Proxmox handle — and spells them every way (both handle
// forms, trailing slashes, `..`, case, the share as a parent or inside .snapshots, reserved
// names), interleaved with kill -9 at any NAS change of a step and a restart of the controller.
// After every step, each change must belong to the step's own object: the claim a CreateVolume
// makes (emptied only when this exact request made it), the claim a DeleteVolume's handle names
// (never one under a reserved name), the snapshot a CreateSnapshot or DeleteSnapshot names
// (a complete one only by the id the driver answered), the csi-driver-nfs folder of exactly its
// archive, and the records of that claim. Files written by the app are never removed by a create.
//   PBT_SEED=<n> replays a run; PBT_RUNS=<n> runs longer (default 200).
import t from 'tap';
import fc from 'fast-check';
import { pino } from 'pino';
import { createNfsController } from '../../../../../src/nfs/controller/controller.js';
import type { NfsStore, NfsStores } from '../../../../../src/nfs/controller/store/store.js';
import { parseSnapshotId } from '../../../../../src/nfs/snapshot-id.js';
import { claimRef } from '../../../../../src/nfs/controller/rpc/claim-ref.js';
import { FakeNas, FakeNasStores } from '../fake-nas.js';
import { changedPaths, pbtParams } from './ownership-model.js';

const SERVER = 'nas';
const EXPORT = '/volume1/k8s-volumes';
const SHARE = `${EXPORT}/talos`;
const S = SHARE.slice(1);
const enc = (s: string) => encodeURIComponent(s).replace(/^\./, '%2E');

function build(speaks: '3' | '4', forged: boolean): FakeNas {
  const nas = new FakeNas(speaks === '4' ? '4' : '3,4', speaks);
  nas.addExport(EXPORT, 'fs1', true);
  for (const p of ['src/data', 'media/app/kept', 'by-hand/f', 'archived-old/data', '.snapshots/hand-made/tree/x'])
    nas.put(`${SHARE}/${p}`, 'dir');
  nas.put(`${SHARE}/snapshot-up/src.tar.gz`, 'file');
  nas.put(`${EXPORT}/outside/keep`, 'dir');
  if (forged) {
    nas.put(`${SHARE}/.snapshots/.restore-media%2Fapp`, 'dir');
    nas.put(`${SHARE}/.snapshots/.filled-media%2Fapp@pv-a`, 'dir');
  }
  return nas;
}

/** Stores whose NAS changes stop (the process is killed) once `budget` of them were made. */
class Killable implements NfsStores {
  budget = Infinity;
  constructor(private readonly inner: NfsStores) {}
  open(server: string, share: string): NfsStore {
    const s = this.inner.open(server, share);
    const gate =
      <A extends unknown[], R>(f: (...a: A) => Promise<R>) =>
      (...a: A): Promise<R> => {
        if (this.budget <= 0) return Promise.reject(new Error('killed'));
        this.budget--;
        return f(...a);
      };
    return {
      ...s,
      ensureDir: gate((...a: Parameters<NfsStore['ensureDir']>) => s.ensureDir(...a)),
      removeTree: gate((...a: Parameters<NfsStore['removeTree']>) => s.removeTree(...a)),
      removeDirIfEmpty: gate((...a: Parameters<NfsStore['removeDirIfEmpty']>) => s.removeDirIfEmpty(...a)),
      rename: gate((...a: Parameters<NfsStore['rename']>) => s.rename(...a)),
      copyTree: gate((...a: Parameters<NfsStore['copyTree']>) => s.copyTree(...a)),
      unpackArchive: gate((...a: Parameters<NfsStore['unpackArchive']>) => s.unpackArchive(...a)),
    };
  }
  ping = () => this.inner.ping();
  health = () => this.inner.health();
  servers = () => this.inner.servers();
  close = () => this.inner.close();
}

/** How an id is spelled: the world's path, then one of these. */
const SPELL = ['as-is', 'slash', 'legacy', 'upper', 'dotdot', 'in-store', 'share-parent', 'policy'] as const;
type Spell = (typeof SPELL)[number];

function volumeHandle(rel: string, how: Spell, policy: string): string {
  switch (how) {
    case 'as-is':
      return `${SERVER}#${S}#${rel}#pv#${policy}`;
    case 'slash':
      return `${SERVER}#/${S}/#${rel}/#pv#${policy}`;
    case 'legacy':
      return `${SERVER}/${S}/${rel}`;
    case 'upper':
      return `${SERVER}#${S}#${rel.toUpperCase()}#pv#${policy}`;
    case 'dotdot':
      return `${SERVER}#${S}#${rel}/../${rel}#pv#${policy}`;
    case 'in-store':
      return `${SERVER}#${S}/.snapshots#${rel}#pv#${policy}`;
    case 'share-parent':
      return `${SERVER}#${EXPORT.slice(1)}#talos/${rel}#pv#${policy}`;
    case 'policy':
      return `${SERVER}#${S}#${rel}#pv#${policy.toUpperCase() || 'ARCHIVE'}`;
  }
}

interface Step {
  kind: 'create' | 'restore' | 'clone' | 'delete' | 'snapshot' | 'deleteSnapshot' | 'write' | 'restart';
  /** Picks from the world's pools at run time. */
  a: number;
  b: number;
  how: Spell;
  policy: string;
  name: string;
  /** Kill after this many NAS changes of the step (undefined: no kill). */
  kill: number | undefined;
}

const stepArb: fc.Arbitrary<Step> = fc.record({
  kind: fc.constantFrom('create', 'restore', 'clone', 'delete', 'snapshot', 'deleteSnapshot', 'write', 'restart'),
  a: fc.nat(),
  b: fc.nat(),
  how: fc.constantFrom(...SPELL),
  policy: fc.constantFrom('', 'delete', 'retain', 'archive'),
  name: fc.constantFrom('pv-a', 'pv-b', 'pv-c', '.snapshots', 'archived-x', '.restore-media%2Fapp', 'snap-1'),
  kill: fc.option(fc.nat({ max: 6 }), { nil: undefined, freq: 3 }),
});

const cap = {
  mount: { fsType: '', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'MULTI_NODE_MULTI_WRITER' as const },
};
const ctx = () => ({ log: pino({ level: 'silent' }), signal: new AbortController().signal });
const pick = <T>(pool: readonly T[], i: number): T | undefined => (pool.length ? pool[i % pool.length] : undefined);
const within = (p: string, base: string) => p === base || p.startsWith(`${base}/`);

interface Truth {
  /** CSI volume name each claim directory was made for (the step that created it). */
  madeFor: Map<string, string>;
  /** Snapshot ids the driver answered, by share#name. */
  snapshots: Map<string, string>;
  volumes: string[];
  written: Set<string>;
}

/** The paths a step may change; `why` explains a refusal in the counterexample. */
function allowed(step: Step, call: Call, truth: Truth, before: Map<number, { path: string }>) {
  const store = `${SHARE}/.snapshots`;
  const existed = new Set([...before.values()].map((x) => x.path));
  return (path: string, went: boolean): boolean => {
    if (call.kind === 'create' || call.kind === 'restore' || call.kind === 'clone') {
      const claim = `${SHARE}/${call.subDir}`;
      const rec = `${store}/.restore-${encodeURIComponent(call.subDir)}`;
      const filled = `${store}/.filled-${encodeURIComponent(call.subDir)}@`;
      if (path === store && !went) return true;
      if (path.startsWith(rec) || path.startsWith(filled)) return true;
      if (claim.startsWith(`${path}/`) && !went) return true; // parents made on the way
      if (!within(path, claim)) return false;
      if (!went) return true;
      // Emptying a claim: only of a directory this exact request made, never the app's files.
      return !truth.written.has(path) && existed.has(claim) && truth.madeFor.get(claim) === call.name;
    }
    if (call.kind === 'delete') {
      const ref = claimRef(call.id);
      if (typeof ref === 'string' || ref.server !== SERVER) return false;
      // Any spelling of a handle names the directory it resolves to (upstream's rule); the share
      // may be a parent of the class's. Its empty parents go with it, never the share.
      const claim = `${ref.share}/${ref.subDir}`;
      if (within(path, claim) || (claim.startsWith(`${path}/`) && path.startsWith(`${ref.share}/`))) return true;
      if (path.startsWith(`${ref.share}/.snapshots/.filled-${encodeURIComponent(ref.subDir)}@`)) return true;
      const first = ref.subDir.split('/')[0] ?? '';
      return !went && within(path, `${ref.share}/archived-${first}`);
    }
    if (call.kind === 'snapshot') {
      // On the source's share, however its handle spells it.
      const src = claimRef(call.source);
      if (typeof src === 'string') return false;
      const dir = `${src.share}/.snapshots/${enc(call.name)}`;
      if (path === `${src.share}/.snapshots` && !went) return true;
      const complete = [...existed].some((p) => p.startsWith(`${dir}/v1,`));
      return within(path, dir) && (!went || !complete);
    }
    if (call.kind === 'deleteSnapshot') {
      const ref = parseSnapshotId(call.id);
      if (!ref || ref.server !== SERVER) return false;
      if (ref.kind === 'upstream')
        return within(path, `${ref.share}/${ref.dir}`) && `${ref.share}/${ref.dir}` === `${SHARE}/snapshot-up`;
      return (
        truth.snapshots.has(`${ref.share}#${ref.name}`) && within(path, `${ref.share}/.snapshots/${enc(ref.name)}`)
      );
    }
    return step.kind === 'write' && call.kind === 'write' && path === call.path;
  };
}

type Call =
  | { kind: 'create' | 'restore' | 'clone'; name: string; subDir: string; source?: string }
  | { kind: 'delete'; id: string }
  | { kind: 'snapshot'; name: string; source: string }
  | { kind: 'deleteSnapshot'; id: string }
  | { kind: 'write'; path: string }
  | { kind: 'none' };

/** The step with its ids drawn from the world as it is now. */
function draw(step: Step, nas: FakeNas, truth: Truth): Call {
  const dirs = [...nas.picture().values()]
    .filter((x) => x.path.startsWith(`${SHARE}/`))
    .map((x) => x.path.slice(SHARE.length + 1));
  const claims = dirs.filter((d) => !d.endsWith('.tar.gz'));
  // Half of the claim paths are new ones (so restores and clones get to fill), half the world's.
  const rel =
    step.a % 2 === 0
      ? (pick(['fresh/a', 'fresh/b', 'media/app'], step.a >> 1) ?? '')
      : (pick(claims, step.a >> 1) ?? '');
  const handles = [
    ...truth.volumes,
    ...claims.map((d) => volumeHandle(d, step.how, step.policy)),
    'pve/pve-1/local/vm-9999-pvc-x',
  ];
  const snapIds = [
    ...truth.snapshots.values(),
    ...truth.snapshots.values(),
    ...dirs
      .filter((d) => d.startsWith('.snapshots/') && d.split('/').length === 2)
      .map(
        (d) =>
          `nfs-snapshot/1#${SERVER}#${step.how === 'slash' ? `/${S}/` : S}#${decodeURIComponent(d.split('/')[1] ?? '')}`,
      ),
    ...dirs.map((d) => `${SERVER}#${S}#${d}#${d}#src`),
    `${SERVER}#${S}#snapshot-up#snapshot-up#src`,
    `${SERVER}#${S}/.snapshots#hand-made#hand-made#tree`,
  ];
  switch (step.kind) {
    case 'create':
      return { kind: 'create', name: step.name, subDir: rel };
    case 'restore': {
      const issued = [...truth.snapshots.values()];
      const source = step.b % 2 === 0 && issued.length ? pick(issued, step.b >> 1) : pick(snapIds, step.b >> 1);
      return source ? { kind: 'restore', name: step.name, subDir: rel, source } : { kind: 'none' };
    }
    case 'clone':
      return { kind: 'clone', name: step.name, subDir: rel, source: pick(handles, step.b) ?? '' };
    case 'delete':
      return { kind: 'delete', id: pick(handles, step.b) ?? '' };
    case 'snapshot':
      return { kind: 'snapshot', name: step.name, source: pick(handles, step.b) ?? '' };
    case 'deleteSnapshot':
      return { kind: 'deleteSnapshot', id: pick(snapIds, step.b) ?? '' };
    case 'write': {
      const made = [...truth.madeFor.keys()].filter((p) => nas.find(p)?.type === 'dir');
      const at = pick(made, step.a);
      return at ? { kind: 'write', path: `${at}/app-${step.b % 1000}` } : { kind: 'none' };
    }
    case 'restart':
      return { kind: 'none' };
  }
}

async function runCall(c: ReturnType<typeof createNfsController>, call: Call, truth: Truth, nas: FakeNas) {
  const outcome = (p: Promise<unknown>) =>
    p.then(
      (r) => ({ ok: true as const, r }),
      (e: unknown) => ({ ok: false as const, r: e instanceof Error ? e.message : String(e) }),
    );
  switch (call.kind) {
    case 'create':
    case 'restore':
    case 'clone': {
      const source =
        call.kind === 'restore'
          ? { snapshot: { snapshotId: call.source ?? '' } }
          : call.kind === 'clone'
            ? { volume: { volumeId: call.source ?? '' } }
            : null;
      const o = await outcome(
        c.createVolume(
          {
            name: call.name,
            capacityRange: { requiredBytes: '1', limitBytes: '0' },
            volumeCapabilities: [cap],
            parameters: { server: SERVER, share: SHARE, subDir: call.subDir, onDelete: 'retain' },
            secrets: {},
            volumeContentSource: source,
            accessibilityRequirements: null,
            mutableParameters: {},
          },
          ctx(),
        ),
      );
      const id = o.ok ? (o.r as { volume?: { volumeId?: string } }).volume?.volumeId : undefined;
      if (id) truth.volumes.push(id, id.replace(/#retain$/, '#delete'), id.replace(/#retain$/, '#archive'));
      return o;
    }
    case 'delete':
      return outcome(c.deleteVolume({ volumeId: call.id, secrets: {} }, ctx()));
    case 'snapshot': {
      const o = await outcome(
        c.createSnapshot?.({ name: call.name, sourceVolumeId: call.source, secrets: {}, parameters: {} }, ctx()) ??
          Promise.reject(new Error('no createSnapshot')),
      );
      const id = o.ok ? (o.r as { snapshot?: { snapshotId?: string } }).snapshot?.snapshotId : undefined;
      const ref = id ? parseSnapshotId(id) : null;
      if (id && ref) truth.snapshots.set(`${ref.share}#${call.name}`, id);
      return o;
    }
    case 'deleteSnapshot':
      return outcome(
        c.deleteSnapshot?.({ snapshotId: call.id, secrets: {} }, ctx()) ??
          Promise.reject(new Error('no deleteSnapshot')),
      );
    case 'write':
      nas.put(call.path, 'file');
      truth.written.add(call.path);
      return { ok: true as const, r: 'written' };
    case 'none':
      return { ok: true as const, r: 'nothing' };
  }
}

t.test('nothing changes that was not made for exactly the id a step names', async (t) => {
  const { seed, numRuns } = pbtParams(200);
  let cases = 0;
  let stepsRun = 0;
  let kills = 0;
  const outcomes = new Map<string, number>();
  const started = Date.now();
  const result = await fc.check(
    fc.asyncProperty(
      fc.constantFrom<'3' | '4'>('3', '4'),
      fc.boolean(),
      fc.array(stepArb, { minLength: 1, maxLength: 12 }),
      async (speaks, forged, steps) => {
        cases++;
        const nas = build(speaks, forged);
        const stores = new Killable(new FakeNasStores(new Map([[SERVER, nas]])));
        const start = () =>
          createNfsController({
            log: pino({ level: 'silent' }),
            callTimeoutMs: 1000,
            stores,
            now: () => new Date('2026-07-01T00:00:00Z'),
          });
        let c = start();
        const truth: Truth = { madeFor: new Map(), snapshots: new Map(), volumes: [], written: new Set() };
        for (const step of steps) {
          stepsRun++;
          const call = draw(step, nas, truth);
          const before = nas.picture();
          stores.budget = step.kill ?? Infinity;
          const o = await runCall(c, call, truth, nas);
          stores.budget = Infinity;
          const killed = !o.ok && o.r === 'killed';
          const key = `${call.kind}:${o.ok ? 'ok' : killed ? 'killed' : 'refused'}`;
          outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
          if (killed || step.kind === 'restart') {
            kills += killed ? 1 : 0;
            c = start(); // kill -9 and restart: nothing in memory survives
          }
          const after = nas.picture();
          const may = allowed(step, call, truth, before);
          const bad: string[] = [];
          for (const x of changedPaths(before, after)) {
            const went = ![...after.values()].some((a) => a === x);
            if (!may(x.path, went)) bad.push(`${went ? 'removed' : 'made'} ${x.path}`);
          }
          if (bad.length)
            throw new Error(
              `${JSON.stringify(call)} (kill ${step.kill}) -> ${JSON.stringify(o.r)}:\n  ${bad.join('\n  ')}`,
            );
          // What each claim directory was made for: the step that made it, or the plain create that took it.
          if (call.kind === 'create' || call.kind === 'restore' || call.kind === 'clone') {
            const claim = `${SHARE}/${call.subDir}`;
            const was = [...before.values()].some((x) => x.path === claim);
            if (nas.find(claim) && (!was || (call.kind === 'create' && o.ok))) truth.madeFor.set(claim, call.name);
          }
          for (const p of [...truth.madeFor.keys()]) if (!nas.find(p)) truth.madeFor.delete(p);
          for (const p of [...truth.written]) if (!nas.find(p)) truth.written.delete(p);
        }
      },
    ),
    { seed, numRuns },
  );
  const ok = (k: string) => outcomes.get(`${k}:ok`) ?? 0;
  t.comment(
    `NFS id ownership property: ${cases} cases, ${stepsRun} steps, ${kills} kills (OK: create ${ok('create')}, restore ${ok('restore')}, clone ${ok('clone')}, delete ${ok('delete')}, snapshot ${ok('snapshot')}, deleteSnapshot ${ok('deleteSnapshot')}), seed ${seed} (replay: PBT_SEED=${seed}), ${Date.now() - started} ms`,
  );
  const why = result.errorInstance instanceof Error ? `\n${result.errorInstance.message}` : '';
  t.notOk(result.failed, (result.failed && `${fc.defaultReportMessage(result)}${why}`) || 'no counterexample');
});

// The first counterexample (seed 1): DeleteSnapshot of an id naming a folder under .snapshots/
// that holds no completion record (one made by hand; a killed copy is the same) removed it,
// although no CreateSnapshot ever answered that id.
t.test('DeleteSnapshot removes only a complete snapshot the driver answered', async (t) => {
  const nas = build('3', false);
  const c = createNfsController({
    log: pino({ level: 'silent' }),
    callTimeoutMs: 1000,
    stores: new FakeNasStores(new Map([[SERVER, nas]])),
  });
  const del = (snapshotId: string) => c.deleteSnapshot?.({ snapshotId, secrets: {} }, ctx());
  t.same(await del(`nfs-snapshot/1#${SERVER}#${S}#hand-made`), {}, 'OK: no such snapshot');
  t.ok(nas.find(`${SHARE}/.snapshots/hand-made/tree/x`), 'the folder is left alone');
  const made = await c.createSnapshot?.(
    { name: 'snap-1', sourceVolumeId: `${SERVER}#${S}#src#pv#`, secrets: {}, parameters: {} },
    ctx(),
  );
  t.ok(nas.find(`${SHARE}/.snapshots/snap-1/tree/data`));
  await del(made?.snapshot?.snapshotId ?? '');
  t.notOk(nas.find(`${SHARE}/.snapshots/snap-1`), 'the snapshot it answered is removed');
});
