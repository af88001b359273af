// Proxmox node plugin over gRPC on a real loop device: NodeStageVolume + NodePublishVolume (and
// NodeUnpublish + NodeUnstage) against the raw commands that do the same work on the same device
// (mkfs when the disk is empty, mount, mount --bind; umount, umount). The program runs compiled in
// node mode; the disk is found the way the integration tier finds it (test/integration/node/
// loop-rig.ts): a wwn-0x<PVC-ID WWN> link in --device-dir pointing at the loop device, so every
// safety check (WWN scheme, signature probe, first-MiB check, device re-check, mount-table
// ownership) runs as it does on a node. The raw commands use the driver's mkfs options
// (mkfsCommand) and mount options (nouuid for xfs). Raw and driver runs alternate on one device so drift and
// noise from other processes hit both; the minimum column is the raw p50, the ratio driver p50 /
// raw p50. The goal: at most upstream's node plugin per case. Upstream's node plugin
// (proxmox-csi-plugin, bench/lib/upstream-node.ts: a cached binary, skipped with a message when
// there is none) runs on its own socket against the same device, in the same rotation (raw,
// ours, upstream, each going first in turn), with its own staging and target paths; each of its
// rows has the raw floor as minimum and notes our p50 / its p50.
//   npx tsx bench/node.ts [--n 20] [--skip-upstream] [--case ext4-empty|ext4-fs|xfs-empty|xfs-fs ...] [--md]
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { promisify } from 'node:util';
import { createLinuxBlockDevices, mkfsCommand, type FsType } from '../src/os/blockdevices.js';
import { createExec } from '../src/os/exec.js';
import { PROXMOX_DISKS } from '../src/proxmox/node/deps.js';
import { wwnHexForSlot } from '../src/proxmox/contract.js';
import { canUseLoopDevices, LoopRig } from '../test/integration/node/loop-rig.js';
import { csiClient, type VolumeCapability } from '../test/helpers/csi-client.js';
import { stageAndPublish, unpublishAndUnstage } from '../test/helpers/stage-publish.js';
import { cpuMs, startProgram } from './lib/program.js';
import {
  startUpstreamNode,
  upstreamNodeBinary,
  UPSTREAM_NODE_VERSION,
  type UpstreamNode,
} from './lib/upstream-node.js';
import { pct, printTable, since, type Row } from './lib/table.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '20' },
    md: { type: 'boolean', default: false },
    'skip-upstream': { type: 'boolean', default: false },
    // Only these cases (repeatable): a quiet window of a few minutes holds one or two of them.
    case: { type: 'string', multiple: true },
  },
});
const N = Number(values.n);
const CASES = ['ext4-empty', 'ext4-fs', 'xfs-empty', 'xfs-fs'];
const only = values.case ?? CASES;
for (const k of only) if (!CASES.includes(k)) throw new Error(`--case ${k}: expected one of ${CASES.join(', ')}`);
const WARM = 2;
const MiB = 1024 * 1024;
const execFileP = promisify(execFile);
const run = async (cmd: string, args: string[]) => {
  await execFileP(cmd, args, { encoding: 'utf8' });
};

const skip = canUseLoopDevices();
if (skip) {
  process.stdout.write(`node bench skipped: ${skip}\n\n`);
  process.exit(0);
}

const teardown: (() => void)[] = [];
const rig = new LoopRig({ teardown: (fn) => teardown.push(fn) });
const onSignal = () => {
  for (const fn of teardown) fn();
  process.exit(130);
};
process.once('SIGINT', onSignal);
process.once('SIGTERM', onSignal);

const SLOT = 5;
const wwn = wwnHexForSlot(SLOT);
const disk = rig.addDisk(1024 * MiB, wwn); // mkfs.xfs wants ≥ 300 MB
const ep = `unix://${rig.path('csi.sock')}`;
const p = await startProgram(
  [
    '--mode',
    'node',
    '--proxmox-endpoint',
    ep,
    '--node-id',
    'bench-node',
    '--region',
    'bench',
    '--zone',
    'bench',
    '--device-dir',
    rig.devDir,
    '--kubelet-dir',
    rig.root,
    '--log-level',
    'warn',
  ],
  [ep],
);
const c = csiClient(ep);

// Upstream's plugin on its own socket, or the reason its rows are left out.
const found = values['skip-upstream'] ? { skip: 'upstream rows skipped (--skip-upstream)' } : upstreamNodeBinary();
let up: UpstreamNode | undefined;
let upClient: ReturnType<typeof csiClient> | undefined;
if ('bin' in found) {
  const upSock = rig.path('upstream.sock');
  up = await startUpstreamNode(found.bin, upSock, 'bench-node');
  upClient = csiClient(`unix://${upSock}`);
} else process.stdout.write(`${found.skip}\n\n`);

/** The volume as kubelet names it; the capability (its fsType) is each case's. */
const volume = {
  volumeId: `bench/bench/local-lvm/vm-9999-pvc-node`,
  publishContext: { DevicePath: `/dev/disk/by-id/wwn-0x${wwn}`, lun: String(SLOT) },
  stagingTargetPath: rig.path('plugins', 'kubernetes.io', 'csi', 'pv', 'stage'),
  targetPath: rig.path('pods', 'p1', 'volumes', 'kubernetes.io~csi', 'pv', 'mount'),
};
/** Upstream's: the same volume, paths of its own, DevicePath the rig's link (see upstream-node.ts). */
const upVolume = {
  volumeId: volume.volumeId,
  publishContext: { DevicePath: `${rig.devDir}/wwn-0x${wwn}`, lun: String(SLOT) },
  stagingTargetPath: rig.path('upstream', 'plugins', 'kubernetes.io', 'csi', 'pv', 'stage'),
  targetPath: rig.path('upstream', 'pods', 'p1', 'volumes', 'kubernetes.io~csi', 'pv', 'mount'),
};
const rawStaging = rig.path('raw', 'stage');
const rawTarget = rig.path('raw', 'pod', 'mount');
fs.mkdirSync(rawStaging, { recursive: true });

/** Empty disk: all zeros again (the loop file's blocks are punched out), as a fresh LV reads. */
const wipe = () => run('blkdiscard', ['-f', disk.device]);

async function rawUp(fsType: FsType, format: boolean): Promise<number> {
  const t0 = process.hrtime.bigint();
  if (format) {
    const [cmd, args] = mkfsCommand(disk.device, fsType);
    await run(cmd, args);
  }
  // The options the driver mounts with (stage.ts): xfs always gets nouuid.
  await run('mount', ['-t', fsType, ...(fsType === 'xfs' ? ['-o', 'nouuid'] : []), disk.device, rawStaging]);
  fs.mkdirSync(rawTarget, { recursive: true });
  await run('mount', ['--bind', rawStaging, rawTarget]);
  return since(t0);
}

async function rawDown(): Promise<number> {
  const t0 = process.hrtime.bigint();
  await run('umount', [rawTarget]);
  fs.rmdirSync(rawTarget);
  await run('umount', [rawStaging]);
  return since(t0);
}

/** One plugin's stage + publish and teardown, timed, with its process's CPU time (all threads):
 * wall figures on a busy machine say little, CPU time is what the plugin itself spends. */
interface Plugin {
  pid: number;
  client: ReturnType<typeof csiClient>;
  vol: typeof volume;
}
const ours: Plugin = { pid: p.pid, client: c, vol: volume };
const theirs: Plugin | undefined = up && upClient && { pid: up.pid, client: upClient, vol: upVolume };

interface Sample {
  ms: number;
  cpu: number;
}

async function pluginUp(pl: Plugin, fsType: FsType): Promise<Sample> {
  const volumeCapability: VolumeCapability = {
    mount: { fsType, mountFlags: [], volumeMountGroup: '' },
    accessMode: { mode: 'SINGLE_NODE_WRITER' },
  };
  const c0 = cpuMs(pl.pid);
  const t0 = process.hrtime.bigint();
  await stageAndPublish(pl.client, { ...pl.vol, volumeCapability });
  const ms = since(t0);
  return { ms, cpu: cpuMs(pl.pid) - c0 };
}

async function pluginDown(pl: Plugin): Promise<Sample> {
  const c0 = cpuMs(pl.pid);
  const t0 = process.hrtime.bigint();
  await unpublishAndUnstage(pl.client, pl.vol);
  const ms = since(t0);
  return { ms, cpu: cpuMs(pl.pid) - c0 };
}

const fmt = (x: number) => x.toFixed(1);
type Who = 'raw' | 'ours' | 'upstream';
const ORDERS: Who[][] = [
  ['raw', 'ours', 'upstream'],
  ['ours', 'upstream', 'raw'],
  ['upstream', 'raw', 'ours'],
];
const rows: Row[] = [];
const down = { raw: [] as number[], ours: [] as Sample[], upstream: [] as Sample[] };
const col = (xs: readonly Sample[], k: keyof Sample) => xs.map((x) => x[k]);
try {
  for (const fsType of ['ext4', 'xfs'] as const) {
    for (const existing of [false, true]) {
      if (!only.includes(`${fsType}-${existing ? 'fs' : 'empty'}`)) continue;
      if (existing) {
        await wipe();
        const [cmd, args] = mkfsCommand(disk.device, fsType);
        await run(cmd, args);
      }
      const raw: number[] = [];
      const got = { ours: [] as Sample[], upstream: [] as Sample[] };
      for (let i = 0; i < WARM + N; i++) {
        const keep = i >= WARM;
        // Rotate which goes first, so none always runs on a warmer cache.
        for (const who of ORDERS[i % ORDERS.length] ?? []) {
          const pl = who === 'ours' ? ours : who === 'upstream' ? theirs : undefined;
          if (who !== 'raw' && !pl) continue;
          if (!existing) await wipe();
          if (!pl) {
            const u = await rawUp(fsType, !existing);
            const d = await rawDown();
            if (keep) {
              raw.push(u);
              down.raw.push(d);
            }
          } else {
            const u = await pluginUp(pl, fsType);
            const d = await pluginDown(pl);
            if (keep) {
              got[who as 'ours' | 'upstream'].push(u);
              down[who as 'ours' | 'upstream'].push(d);
            }
          }
        }
      }
      const base = pct(raw, 50);
      const cmds = `${existing ? '' : `mkfs.${fsType} + `}mount + mount --bind`;
      const state = existing ? ', has fs' : ', empty disk';
      rows.push({ what: `raw ${cmds}, ${fsType}${existing ? ', has fs' : ', empty'}`, samples: raw });
      rows.push({
        what: `NodeStage + NodePublish, ${fsType}${state}`,
        samples: col(got.ours, 'ms'),
        min: base,
        note: `minimum = raw p50 (raw min ${fmt(Math.min(...raw))} ms); program CPU p50 ${fmt(pct(col(got.ours, 'cpu'), 50))} ms`,
      });
      if (theirs) {
        const upP50 = pct(col(got.upstream, 'ms'), 50);
        rows.push({
          what: `upstream ${UPSTREAM_NODE_VERSION}: NodeStage + NodePublish, ${fsType}${state}`,
          samples: col(got.upstream, 'ms'),
          min: base,
          note: `its CPU p50 ${fmt(pct(col(got.upstream, 'cpu'), 50))} ms; ours / upstream p50 = ${(pct(col(got.ours, 'ms'), 50) / upP50).toFixed(2)}×`,
        });
      }
    }
  }
  rows.push({ what: 'raw umount + umount (all cases)', samples: down.raw });
  rows.push({
    what: 'NodeUnpublish + NodeUnstage (all cases)',
    samples: col(down.ours, 'ms'),
    min: pct(down.raw, 50),
    note: `minimum = raw p50 (raw min ${fmt(Math.min(...down.raw))} ms); program CPU p50 ${fmt(pct(col(down.ours, 'cpu'), 50))} ms`,
  });
  if (theirs) {
    rows.push({
      what: `upstream ${UPSTREAM_NODE_VERSION}: NodeUnpublish + NodeUnstage (all cases)`,
      samples: col(down.upstream, 'ms'),
      min: pct(down.raw, 50),
      note:
        `its CPU p50 ${fmt(pct(col(down.upstream, 'cpu'), 50))} ms; ours / upstream p50 = ` +
        `${(pct(col(down.ours, 'ms'), 50) / pct(col(down.upstream, 'ms'), 50)).toFixed(3)}×; ` +
        'its unstage runs fstrim and sleeps 3 s after the umount',
    });
  }
  // What the driver does on top of the raw commands: two gRPC round trips (a CSI call is one),
  // and the signature check that keeps it from formatting or mounting a disk it must not — read
  // in-process (68 KiB at the start and the last 1544 KiB, src/os/signature.ts) on an empty disk or one
  // holding the filesystem asked for, blkid -p for anything else.
  const probe: number[] = [];
  const upProbe: number[] = [];
  const blkid: number[] = [];
  const quick: number[] = [];
  const bd = createLinuxBlockDevices({ exec: createExec(), driverDisks: PROXMOX_DISKS });
  for (let i = 0; i < N; i++) {
    let t0 = process.hrtime.bigint();
    await c.identity.Probe({});
    probe.push(since(t0));
    if (upClient) {
      t0 = process.hrtime.bigint();
      await upClient.identity.Probe({});
      upProbe.push(since(t0));
    }
    t0 = process.hrtime.bigint();
    await run('blkid', ['-p', '-o', 'export', disk.device]);
    blkid.push(since(t0));
    t0 = process.hrtime.bigint();
    await bd.signature(disk.device);
    quick.push(since(t0));
  }
  // On an empty disk the check reads 2.6 MiB (68 KiB + the rest of the first MiB + 4 KiB at 2 MiB
  // + the last 1544 KiB) where a formatted one needs 1.6 MiB: the larger part of what the
  // empty-disk rows pay over the has-fs rows besides mkfs itself.
  const quickEmpty: number[] = [];
  for (let i = 0; i < N; i++) {
    await wipe();
    const t0 = process.hrtime.bigint();
    const sig = await bd.signature(disk.device);
    quickEmpty.push(since(t0));
    if (sig.kind !== 'empty') throw new Error(`a wiped disk read as ${sig.kind}`);
  }
  rows.push({ what: 'of which: one gRPC round trip (Probe)', samples: probe, note: 'stage + publish make 2' });
  if (upClient) rows.push({ what: `upstream ${UPSTREAM_NODE_VERSION}: one gRPC round trip (Probe)`, samples: upProbe });
  rows.push({
    what: 'signature check in-process (2 reads)',
    samples: quick,
    note: 'the fs asked for',
  });
  rows.push({
    what: 'signature check in-process, empty (4 reads)',
    samples: quickEmpty,
    note: 'empty disk: first MiB must be zeros',
  });
  rows.push({
    what: 'signature check by blkid -p',
    samples: blkid,
    note: 'only when the in-process read is not sure',
  });
  printTable({
    title: `Proxmox node plugin over gRPC (program process, ${disk.device} on a sparse file, 1 GiB; ${N} per row)`,
    unit: 'ms',
    rows,
  });
} finally {
  c.close();
  upClient?.close();
  await p.stop();
  await up?.stop();
  for (const fn of teardown) fn();
}
