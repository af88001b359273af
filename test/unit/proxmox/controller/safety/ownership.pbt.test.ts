// The property-based search over the fake API (docs/ownership.md, "Invariants and replay"):
// generated clusters × generated sequences of every controller RPC, hand edits between them and
// one injected fault per step; after every step nothing the driver may not touch was freed,
// resized, re-lined, attached or detached, no disk went onto a second VM, and no helper
// attachment outlived its call. PBT_SEED replays a run, PBT_RUNS sets how many cases.
import t from 'tap';
import { FakeProxmox } from '../../api/fake-api.js';
import { controllerOn } from '../../fake-controller.js';
import {
  type ClusterPicture,
  type ClusterSpec,
  type Fault,
  type Hand,
  NODE,
  RESTORED,
  STORAGE,
  type StepRunner,
  callOp,
  pbtSettings,
  refValue,
  search,
  releasedEntry,
} from '../../../../helpers/proxmox-ownership.js';

const GiB = 2 ** 30;

function build(spec: ClusterSpec): FakeProxmox {
  const f = new FakeProxmox();
  f.addNode(NODE);
  for (const v of spec.vms) {
    const vm = f.addVm({ vmid: v.vmid, name: v.name, node: NODE, running: v.running });
    if (v.description === undefined) continue;
    vm.config.delete('scsi0');
    vm.config.set('description', v.description);
    vm.config.set(...releasedEntry(v.vmid));
  }
  for (const d of spec.disks) f.storageOf(NODE, STORAGE).volumes.set(d.disk, d.gib * GiB);
  for (const r of spec.refs) applyHand(f, r);
  return f;
}

function applyHand(f: FakeProxmox, h: Hand): void {
  const vm = f.vms.get(h.vm);
  if (!vm) return;
  if ('remove' in h) {
    vm.config.delete(h.key);
    return;
  }
  const value = refValue(h);
  if (h.where === 'config') vm.config.set(h.key, value);
  else if (h.where === 'pending') vm.pending.set(h.key, value);
  else {
    vm.snapshots ??= new Map();
    const snap = vm.snapshots.get('before-upgrade') ?? new Map<string, string>();
    snap.set(h.key, value);
    vm.snapshots.set('before-upgrade', snap);
  }
}

function picture(f: FakeProxmox): ClusterPicture {
  return {
    volumes: new Map(f.storageOf(NODE, STORAGE).volumes),
    vms: [...f.vms.values()].map((v) => ({
      vmid: v.vmid,
      name: v.name,
      running: v.running,
      config: Object.fromEntries(v.config),
      pending: Object.fromEntries(v.pending),
      pendingDelete: [...v.pendingDelete],
      snapshots: Object.fromEntries([...(v.snapshots ?? [])].map(([n, m]) => [n, Object.fromEntries(m)])),
    })),
  };
}

type Methods = FakeProxmox['faults']['dropAfter'] extends Map<infer K, number> ? K : never;

function runner(f: FakeProxmox): StepRunner {
  const c = controllerOn(f);
  return {
    picture: () => Promise.resolve(picture(f)),
    hand: (h) => {
      applyHand(f, h);
      return Promise.resolve();
    },
    fault: (x: Fault) => {
      if (x.kind === 'lock') f.faults.lockTimeouts = 1;
      else if (x.kind === 'lost') f.faults.dropAfter.set(x.method as Methods, 1);
      else if (x.kind === 'refused') f.faults.dropBefore.set(x.method as Methods, 1);
      return Promise.resolve();
    },
    clearFaults: () => {
      f.faults.lockTimeouts = 0;
      f.faults.dropAfter.clear();
      f.faults.dropBefore.clear();
      return Promise.resolve();
    },
    call: (op, made) => callOp(c, op, 10_000, made),
  };
}

t.test('no generated cluster and call sequence breaks the ownership invariant (fake API)', async (t) => {
  const { seed, numRuns } = pbtSettings(300);
  const r = await search({ seed, numRuns, maxSteps: 8 }, (spec) =>
    Promise.resolve({ runner: runner(build(spec)), close: () => Promise.resolve() }),
  );
  t.comment(
    `ownership PBT (fake API): seed=${seed} runs=${numRuns}: ${r.cases} cases, ${r.steps} steps in ${r.ms} ms; replay: PBT_SEED=${seed} PBT_RUNS=${numRuns}`,
  );
  t.pass(`${r.cases} cases, ${r.steps} steps, no counterexample`);
});

t.test('with volume VMs: only our volume VM makes its restored disk the driver’s (fake API)', async (t) => {
  const { seed, numRuns } = pbtSettings(300);
  const r = await search({ seed, numRuns, maxSteps: 8, world: RESTORED }, (spec) =>
    Promise.resolve({ runner: runner(build(spec)), close: () => Promise.resolve() }),
  );
  t.comment(
    `ownership PBT with volume VMs (fake API): seed=${seed} runs=${numRuns}: ${r.cases} cases, ${r.steps} steps`,
  );
  t.pass(`${r.cases} cases, ${r.steps} steps, no counterexample`);
});

// Seeds whose counterexamples were fixed, replayed as named regressions (docs/ownership.md):
// 875796400 first found a disk attached by hand within the disk index's TTL and then published to
// a second VM (the exclusivity check read cached entries; it reads the host's VMs now); with that
// fixed, it and 11 found an unpublish whose unlink dropped another disk's pending value in the
// same key, and 12 a publish whose leftover-unusedN delete dropped a pending unusedN of another
// disk (a delete or unlink of a key whose current and pending values name two disks is refused).
for (const [seed, what] of [
  [875796400, 'hand attach within the TTL; unlink dropping another pending disk'],
  [11, 'unlink dropping another pending disk'],
  [12, 'unusedN delete dropping another pending unusedN'],
] as const) {
  t.test(`counterexample seed ${seed} stays fixed: ${what}`, async (t) => {
    const r = await search({ seed, numRuns: 300, maxSteps: 8 }, (spec) =>
      Promise.resolve({ runner: runner(build(spec)), close: () => Promise.resolve() }),
    );
    t.pass(`${r.cases} cases, ${r.steps} steps, no counterexample`);
  });
}
