// Proxmox snapshot and restore time against volume size (1, 10, 100 GiB), through the controller
// backend against the simulator with real bytes (qmp backend without guests: every volume,
// snapshot and clone is a sparse file holding 64 MiB written at random offsets), next to
// upstream's full-copy cost for the same size. proxmox-csi-plugin copies the whole disk with a
// `dd` of the live LV (docs/snapshots.md, "Upstream"), so its floor is size / this disk's
// sequential copy rate, measured here by copying 1 GiB of written data with `dd … conv=fsync`.
// Ours is a thin snapshot and a linked clone: the Proxmox calls of the helper-VM steps and
// whatever the simulator's own file copy costs (cp --reflink=auto --sparse=always: proportional
// to the data written, not the size; a real LVM-thin snapshot or linked clone copies nothing).
//   npx tsx bench/proxmox-snapshot.ts [--runs 3] [--latency 20] [--md]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SimulatorAdmin, startSimulator } from '../sim/index.js';
import { callCtx as ctx, capacity, createReq, preferZone } from '../test/helpers/csi-requests.js';
import { clusterOf, proxmoxController } from '../test/helpers/proxmox-on-sim.js';
import { simState } from '../test/helpers/sim-state.js';
import { snapshotSimConfig } from '../test/helpers/snapshot-sim-config.js';
import { benchFlags } from './lib/flags.js';
import { printTable, since, type Row } from './lib/table.js';

const values = benchFlags({ runs: 3, latency: 20 });
const GiB = 2 ** 30;
const SIZES = [1, 10, 100];
const WRITTEN = 64 * 2 ** 20;

const config = snapshotSimConfig();
// Room for every size twice (source and restore) under the pool guard's default limits.
for (const n of config.nodes) for (const st of n.storages) if (st.id === 'local-lvm') Object.assign(st, { size: '4T' });

const closers: Array<() => unknown> = [];
const t = { teardown: (fn: () => unknown) => closers.push(fn) };
const sim = await startSimulator({
  config,
  backend: 'qmp',
  qmp: {},
  faults: { latencyMs: values.latency, taskDurationMs: 5, authFailureDelayMs: 0, lockTimeoutMs: 10_000 },
});
t.teardown(() => sim.close());
const admin = new SimulatorAdmin(sim.adminUrl);
const c = proxmoxController(t, clusterOf(sim));

const fileOf = async (volid: string): Promise<string> => {
  const v = (await simState(admin)).nodes
    .flatMap((n) => n.storages.flatMap((s) => s.volumes))
    .find((x) => x.volid === volid);
  if (!v?.file) throw new Error(`no file behind ${volid}`);
  return v.file;
};
const volidOf = (id: string) => id.split('/').slice(2).join(':');
/** 64 chunks of 1 MiB at offsets spread over the whole disk: data a snapshot must keep. */
function writeData(file: string, size: number): void {
  const fd = fs.openSync(file, 'r+');
  const chunk = Buffer.alloc(2 ** 20, 0x5a);
  for (let i = 0; i < WRITTEN / chunk.length; i++)
    fs.writeSync(fd, chunk, 0, chunk.length, Math.floor((i * (size - chunk.length)) / 64 / 4096) * 4096);
  fs.closeSync(fd);
}
/** The operation's time, its Proxmox calls, and the changes among them (each one round at least). */
const calls = async <T>(fn: () => Promise<T>): Promise<{ ms: number; calls: number; changes: number; value: T }> => {
  const before = (await admin.requests()).lastSeq;
  const t0 = process.hrtime.bigint();
  const value = await fn();
  const ms = since(t0);
  const { entries } = await admin.requests(before);
  return { ms, calls: entries.length, changes: entries.filter((e) => e.method !== 'GET').length, value };
};

// This disk's sequential copy rate: 1 GiB of written data, read and written with fsync.
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-snap-dd-'));
execFileSync('dd', ['if=/dev/urandom', `of=${tmp}/src`, 'bs=4M', 'count=256', 'status=none']);
const dd0 = process.hrtime.bigint();
execFileSync('dd', [`if=${tmp}/src`, `of=${tmp}/dst`, 'bs=4M', 'conv=fsync', 'status=none']);
const ddMsPerGiB = since(dd0);
fs.rmSync(tmp, { recursive: true, force: true });

const rows: Row[] = [];
try {
  for (const gib of SIZES) {
    const snap: number[] = [];
    const restore: number[] = [];
    let snapCalls = { calls: 0, changes: 0 };
    let restoreCalls = { calls: 0, changes: 0 };
    for (let run = 0; run < values.runs; run++) {
      const name = `pvc-b${gib}-${run}`;
      const made = await c.createVolume(
        createReq(name, {
          capacityRange: capacity(gib * GiB),
          parameters: { storage: 'local-lvm' },
          accessibilityRequirements: preferZone('hyper1'),
        }),
        ctx(),
      );
      const src = made.volume?.volumeId ?? '';
      writeData(await fileOf(volidOf(src)), gib * GiB);
      const s = await calls(() =>
        c.createSnapshot({ name: `snap-b${gib}-${run}`, sourceVolumeId: src, secrets: {}, parameters: {} }, ctx()),
      );
      snap.push(s.ms);
      snapCalls = s;
      const snapshotId = s.value.snapshot?.snapshotId ?? '';
      const r = await calls(() =>
        c.createVolume(
          createReq(`${name}-r`, {
            capacityRange: capacity(gib * GiB),
            parameters: { storage: 'local-lvm' },
            accessibilityRequirements: preferZone('hyper1'),
            volumeContentSource: { snapshot: { snapshotId } },
          }),
          ctx(),
        ),
      );
      restore.push(r.ms);
      restoreCalls = r;
      await c.deleteVolume({ volumeId: r.value.volume?.volumeId ?? '', secrets: {} }, ctx());
      await c.deleteSnapshot({ snapshotId, secrets: {} }, ctx());
      await c.deleteVolume({ volumeId: src, secrets: {} }, ctx());
    }
    const fullCopy = gib * ddMsPerGiB;
    rows.push(
      {
        what: `CreateSnapshot ${gib} GiB (${snapCalls.calls} calls, ${snapCalls.changes} changes)`,
        samples: snap,
        min: snapCalls.changes * values.latency,
        note: `upstream's dd of ${gib} GiB here: ≥ ${(fullCopy / 1000).toFixed(1)} s (${(fullCopy / Math.max(1, snap[0] ?? 1)).toFixed(0)}× ours)`,
      },
      {
        what: `restore ${gib} GiB (${restoreCalls.calls} calls, ${restoreCalls.changes} changes)`,
        samples: restore,
        min: restoreCalls.changes * values.latency,
        note: `upstream restores by copying too: ≥ ${(fullCopy / 1000).toFixed(1)} s`,
      },
    );
  }
} finally {
  for (const fn of closers.reverse()) await fn();
}
printTable({
  title: `Proxmox snapshot and restore vs size (simulator +${values.latency} ms per call, 64 MiB written per volume; this disk copies 1 GiB in ${(ddMsPerGiB / 1000).toFixed(2)} s with dd conv=fsync)`,
  unit: 'ms',
  rows,
});
process.stdout.write(
  'minimum: one round at the injected latency per change the operation must send (a thin snapshot and a linked clone copy\n' +
    'no data); the reads between them are the fresh views the ownership gate decides each step on (docs/ownership.md).\n',
);
