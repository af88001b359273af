// The property-based search over the fake API (docs/ownership.md, "Invariants and replay"):
// generated clusters × generated sequences of every controller RPC, hand edits between them and
// one injected fault per step; after every step nothing the driver may not touch was freed,
// resized, re-lined, attached or detached, no disk went onto a second VM, and no helper
// attachment outlived its call. PBT_SEED replays a run, PBT_RUNS sets how many cases.
import t from 'tap';
import fc from 'fast-check';
import type * as T from '../../../../../src/csi/types.js';
import { FakeProxmox } from '../../fake-api.js';
import { controllerOn } from '../../fake-controller.js';
import { callCtx, createReq, expandReq, publishReq, unpublishReq } from '../../../../helpers/csi-requests.js';
import { kindOf } from '../../../../helpers/outcome.js';
import {
  type ClusterPicture,
  type ClusterSpec,
  type Fault,
  type Hand,
  NODE,
  type Op,
  STORAGE,
  type StepRunner,
  clusterArb,
  handleOf,
  pbtSettings,
  refValue,
  runSteps,
  stepArb,
} from '../../../../helpers/proxmox-ownership.js';

const GiB = 2 ** 30;

function build(spec: ClusterSpec): FakeProxmox {
  const f = new FakeProxmox();
  f.addNode(NODE);
  for (const v of spec.vms) f.addVm({ vmid: v.vmid, name: v.name, node: NODE, running: v.running });
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
      snapshots: Object.fromEntries([...v.snapshots].map(([n, m]) => [n, Object.fromEntries(m)])),
    })),
  };
}

type Methods = FakeProxmox['faults']['dropAfter'] extends Map<infer K, number> ? K : never;

/** One CSI call of the generated kind; its outcome kind, never a throw. */
export function callOp(c: ReturnType<typeof controllerOn>, op: Op): Promise<string> {
  const ctx = callCtx(10_000);
  const mount: T.VolumeCapability = publishReq('x', 'y').volumeCapability as T.VolumeCapability;
  switch (op.kind) {
    case 'create':
      return kindOf(c.createVolume(createReq(op.name), ctx));
    case 'delete':
      return kindOf(c.deleteVolume({ volumeId: handleOf(op.disk), secrets: {} }, ctx));
    case 'publish':
      return kindOf(c.controllerPublishVolume({ ...publishReq(handleOf(op.disk), op.vm), readonly: op.readonly }, ctx));
    case 'unpublish':
      return kindOf(c.controllerUnpublishVolume(unpublishReq(handleOf(op.disk), op.vm), ctx));
    case 'expand':
      return kindOf(c.controllerExpandVolume(expandReq(handleOf(op.disk), op.gib * GiB, mount), ctx));
    case 'modify':
      return kindOf(
        c.controllerModifyVolume({ volumeId: handleOf(op.disk), mutableParameters: op.params, secrets: {} }, ctx),
      );
    case 'list':
      return kindOf(c.listVolumes({ maxEntries: 0, startingToken: '' }, ctx));
    case 'get':
      return kindOf(c.controllerGetVolume({ volumeId: handleOf(op.disk) }, ctx));
  }
}

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
    call: (op) => callOp(c, op),
  };
}

t.test('no generated cluster and call sequence breaks the ownership invariant (fake API)', async (t) => {
  const { seed, numRuns } = pbtSettings(300);
  const count = { cases: 0, steps: 0 };
  const started = Date.now();
  const scenario = clusterArb.chain((spec) =>
    fc.tuple(
      fc.constant(spec),
      fc.array(
        stepArb(
          spec.vms.map((v) => v.vmid),
          true,
        ),
        { minLength: 1, maxLength: 8 },
      ),
    ),
  );
  await fc.assert(
    fc.asyncProperty(scenario, async ([spec, steps]) => {
      count.cases++;
      await runSteps(runner(build(spec)), steps, count);
    }),
    { seed, numRuns },
  );
  t.comment(
    `ownership PBT (fake API): seed=${seed} runs=${numRuns}: ${count.cases} cases, ${count.steps} steps in ${Date.now() - started} ms; replay: PBT_SEED=${seed} PBT_RUNS=${numRuns}`,
  );
  t.pass(`${count.cases} cases, ${count.steps} steps, no counterexample`);
});
