// The property-based search over the Proxmox VE simulator (docs/ownership.md, "Invariants and
// replay"): the same generated clusters, steps and invariant as the unit run over the fake API
// (test/helpers/proxmox-ownership.ts), against the real controller over HTTPS, with the
// simulator's own semantics (qemu-server's pending and snapshot sections, unusedN bookkeeping,
// hand edits through its admin API) and dropped connections as faults (a lock fault of the
// generated steps is none here: the unit run covers lock timeouts). Fewer cases: each one
// starts a simulator. PBT_SEED replays a run, PBT_SIM_RUNS sets how many cases.
import t from 'tap';
import { SNAPSHOT_TOKEN_PRIVILEGES } from '../../helpers/snapshot-sim-config.js';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_CONFIG_PATH } from '../../../sim/index.js';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { proxmoxController, startSimCluster } from '../../helpers/proxmox-on-sim.js';
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
  ownerOf,
  pbtSettings,
  refValue,
  search,
  releasedEntry,
} from '../../helpers/proxmox-ownership.js';
import { simState } from '../../helpers/sim-state.js';
import { COPY_VMS, type PermitSeen, type SentRequest } from '../../helpers/proxmox-ownership-copies.js';
import { OwnershipPort } from '../../../src/proxmox/controller/safety/ownership-port.js';
import { OwnershipPermit, type PermitKind } from '../../../src/proxmox/controller/safety/permit.js';

const GiB = 2 ** 30;
const SNAP = 'before-upgrade';
const ROUTES: Record<string, string> = {
  updateVmConfig: 'POST /nodes/{node}/qemu/{vmid}/config',
  unlinkDisks: 'PUT /nodes/{node}/qemu/{vmid}/config',
  freeDisk: 'DELETE /nodes/{node}/storage/{storage}/content/{volume}',
  resizeDisk: 'PUT /nodes/{node}/qemu/{vmid}/resize',
  allocDisk: 'POST /nodes/{node}/storage/{storage}/content',
  vmPending: 'GET /nodes/{node}/qemu/{vmid}/pending',
  createVm: 'POST /nodes/{node}/qemu',
  destroyVm: 'DELETE /nodes/{node}/qemu/{vmid}',
  snapshotVm: 'POST /nodes/{node}/qemu/{vmid}/snapshot',
  deleteVmSnapshot: 'DELETE /nodes/{node}/qemu/{vmid}/snapshot/{snapname}',
  linkedClone: 'POST /nodes/{node}/qemu/{vmid}/clone',
  migrateVm: 'POST /nodes/{node}/qemu/{vmid}/migrate',
};

// Every permit a port of this process is handed, recorded before the port checks and sends it:
// the search then asks whether each mutating request the simulator saw had one naming it.
const permitsSeen: PermitSeen[] = [];
for (const m of ['freeDisk', 'allocDisk', 'resizeDisk', 'updateVmConfig', 'unlinkDisks', 'copyStep'] as const) {
  const proto = OwnershipPort.prototype as unknown as Record<string, (...a: unknown[]) => unknown>;
  const orig = proto[m];
  if (!orig) throw new Error(`OwnershipPort has no ${m}`);
  proto[m] = function (this: unknown, p: unknown, ...rest: unknown[]): unknown {
    if (p instanceof OwnershipPermit) {
      const q = p as unknown as OwnershipPermit<PermitKind>;
      permitsSeen.push({ kind: q.kind, body: { ...q.body } });
    }
    return orig.call(this, p, ...rest);
  };
}

const LVM = { id: STORAGE, type: 'lvmthin', vgname: 'pve', thinpool: 'data', size: '200G', used: '24G' };
const OTHER_NODE = 'hyper2';

/** The default cluster file with hyper1 alone (and hyper2, empty, for copies), holding the generated VMs and their keys. */
function clusterFile(spec: ClusterSpec): Record<string, unknown> {
  const base = parseYaml(readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as Record<string, unknown>;
  const copies = (spec.copies?.vms ?? []).map((c) => {
    const v = COPY_VMS.find((x) => x.vmid === c.vmid);
    return {
      vmid: c.vmid,
      name: v?.name ?? 'x',
      status: c.running ? 'running' : 'stopped',
      bootDisk: { storage: STORAGE, size: '1G' },
      config: v?.description ? { description: v.description } : {},
    };
  });
  const vms = spec.vms.map((v) => {
    const keys = (where: string) =>
      Object.fromEntries(
        spec.refs.filter((r) => r.vm === v.vmid && r.where === where).map((r) => [r.key, refValue(r)]),
      );
    const snap = keys('snapshot');
    return {
      vmid: v.vmid,
      name: v.name,
      status: v.running ? 'running' : 'stopped',
      ...(v.description === undefined && { bootDisk: { storage: STORAGE, size: '32G' } }),
      config: {
        ...keys('config'),
        ...(v.description !== undefined && {
          description: v.description,
          ...Object.fromEntries([releasedEntry(v.vmid)]),
        }),
      },
      pending: keys('pending'),
      ...(Object.keys(snap).length > 0 && { snapshots: { [SNAP]: snap } }),
    };
  });
  const tokens = base.tokens as Array<Record<string, unknown>>;
  return {
    ...base,
    ...(spec.copies && {
      tokens: [
        { id: tokens[0]?.id, secret: tokens[0]?.secret, privileges: SNAPSHOT_TOKEN_PRIVILEGES },
        ...tokens.slice(1),
      ],
    }),
    nodes: [
      {
        name: NODE,
        storages: [LVM],
        vms: [...vms, ...copies],
      },
      // A second host for restores and clones into another zone (its volume VMs migrate there).
      ...(spec.copies ? [{ name: OTHER_NODE, storages: [LVM], vms: [] }] : []),
    ],
  };
}

type Sim = Awaited<ReturnType<typeof startSimCluster>>;

async function picture(s: Sim): Promise<ClusterPicture> {
  const st = await simState(s.admin);
  const storage = st.nodes.find((n) => n.name === NODE)?.storages.find((x) => x.id === STORAGE);
  const snaps = (storage?.volumes ?? []) as Array<{ volid: string; snapshots?: Array<{ name: string }> }>;
  return {
    volumeSnaps: new Set(
      snaps.flatMap((v) => (v.snapshots ?? []).map((x) => `${v.volid.slice(STORAGE.length + 1)}@${x.name}`)),
    ),
    volumes: new Map((storage?.volumes ?? []).map((v) => [v.volid.slice(STORAGE.length + 1), v.size])),
    elsewhere: new Set(
      st.nodes
        .filter((n) => n.name !== NODE)
        .flatMap((n) => n.storages.filter((x) => x.id === STORAGE).flatMap((x) => x.volumes))
        .map((v) => v.volid.slice(STORAGE.length + 1)),
    ),
    vms: st.vms.map((v) => ({
      vmid: v.vmid,
      name: v.name ?? '',
      running: v.status === 'running',
      config: v.config,
      pending: v.pending,
      pendingDelete: v.pendingDelete,
      snapshots: v.snapshots,
    })),
  };
}

async function hand(s: Sim, h: Hand): Promise<void> {
  if ('remove' in h) {
    await s.admin.patchVm(h.vm, { config: { [h.key]: null } });
    return;
  }
  const value = refValue(h);
  if (h.where === 'snapshot') {
    const vm = (await simState(s.admin)).vms.find((v) => v.vmid === h.vm);
    await s.admin.patchVm(h.vm, { snapshots: { [SNAP]: { ...(vm?.snapshots[SNAP] ?? {}), [h.key]: value } } });
  } else await s.admin.patchVm(h.vm, { [h.where]: { [h.key]: value } });
}

/** A simulator with the generated cluster, a controller on it, and the step runner over both. */
async function open(spec: ClusterSpec): Promise<{ runner: StepRunner; close: () => Promise<void> }> {
  const teardowns: Array<() => unknown> = [];
  const local = { teardown: (f: () => unknown) => void teardowns.push(f) };
  const close = async () => {
    for (const f of teardowns.reverse()) await f();
  };
  try {
    const s = await startSimCluster(local, { config: clusterFile(spec) });
    // Disks no VM config names (orphans, spare disks of the driver) are allocated through the API.
    const api = createHttpProxmoxApi({ cluster: s.cluster });
    teardowns.push(() => api.close());
    const have = (await picture(s)).volumes;
    for (const d of spec.disks)
      if (!have.has(d.disk))
        await api.allocDisk(NODE, STORAGE, { vmid: ownerOf(d.disk) ?? 0, filename: d.disk, sizeBytes: d.gib * GiB });
    let c = proxmoxController(local, s.cluster, { tuning: { startupFenceMs: 0 } });
    let seen = (await s.admin.requests(0)).lastSeq;
    const runner: StepRunner = {
      picture: () => picture(s),
      hand: (h) => hand(s, h),
      fault: async (f: Fault) => {
        if (f.kind === 'lost' || f.kind === 'refused')
          await s.admin.patchFaults({
            dropRate: 1,
            dropPhase: f.kind === 'lost' ? 'after' : 'before',
            dropRoutes: [ROUTES[f.method] ?? ''],
          });
      },
      clearFaults: async () => {
        await s.admin.patchFaults({ dropRate: 0, dropRoutes: [] });
      },
      call: (op, made) => callOp(c, op, 15_000, made),
      // As after kill -9 between two calls: a new process with no cache, fence or lock of the old.
      restart: async () => {
        await c.close();
        c = proxmoxController(local, s.cluster, { tuning: { startupFenceMs: 0 } });
      },
      ...(spec.copies && {
        sent: async () => {
          const r = await s.admin.requests(seen);
          seen = r.lastSeq;
          return (
            r.entries
              // A request dropped before the simulator read it changed nothing (and has no params).
              .filter((e) => e.method !== 'GET' && e.fault !== 'drop-before')
              .map((e): SentRequest => ({ method: e.method, path: e.path, route: e.route, params: e.params ?? {} }))
          );
        },
        permits: () => permitsSeen.splice(0),
      }),
    };
    return { runner, close };
  } catch (e) {
    await close();
    throw e;
  }
}

t.test('no generated cluster and call sequence breaks the ownership invariant (simulator)', async (t) => {
  const { seed } = pbtSettings(0, 8);
  const numRuns = process.env.PBT_SIM_RUNS ? Number(process.env.PBT_SIM_RUNS) : 25;
  const r = await search({ seed, numRuns, maxSteps: 5 }, open);
  t.comment(
    `ownership PBT (simulator): seed=${seed} runs=${numRuns}: ${r.cases} cases, ${r.steps} steps in ${r.ms} ms; replay: PBT_SEED=${seed} PBT_SIM_RUNS=${numRuns}`,
  );
  t.pass(`${r.cases} cases, ${r.steps} steps, no counterexample`);
});

t.test('with volume VMs: restored disks are grown, re-lined and freed only when ours (simulator)', async (t) => {
  const { seed } = pbtSettings(0, 8);
  const numRuns = process.env.PBT_SIM_RUNS ? Number(process.env.PBT_SIM_RUNS) : 10;
  const r = await search({ seed, numRuns, maxSteps: 5, world: RESTORED }, open);
  t.comment(
    `ownership PBT with volume VMs (simulator): seed=${seed} runs=${numRuns}: ${r.cases} cases, ${r.steps} steps`,
  );
  t.pass(`${r.cases} cases, ${r.steps} steps, no counterexample`);
});

t.test('snapshots, restores and clones keep the ownership invariant (simulator)', async (t) => {
  const { seed } = pbtSettings(0, 8);
  const numRuns = process.env.PBT_SIM_RUNS ? Number(process.env.PBT_SIM_RUNS) : 25;
  const r = await search({ seed, numRuns, maxSteps: 6, copies: true }, open);
  t.comment(
    `ownership PBT with snapshots (simulator): seed=${seed} runs=${numRuns}: ${r.cases} cases, ${r.steps} steps in ${r.ms} ms; replay: PBT_SEED=${seed} PBT_SIM_RUNS=${numRuns}`,
  );
  const ok = (k: string) => [...r.outcomes].filter(([x]) => x === `${k}:ok`).reduce((n, [, c]) => n + c, 0);
  t.comment(
    `answered OK: ${['snapshot', 'deleteSnapshot', 'restore', 'clone', 'delete'].map((k) => `${k} ${ok(k)}`).join(', ')}`,
  );
  t.pass(`${r.cases} cases, ${r.steps} steps, no counterexample`);
});
