// Proxmox node plugin over gRPC on a real loop device: NodeStageVolume + NodePublishVolume (and
// NodeUnpublish + NodeUnstage) against the raw commands that do the same work on the same device
// (mkfs when the disk is empty, mount, mount --bind; umount, umount). The program runs compiled in
// node mode; the disk is found the way the integration tier finds it (test/integration/node/
// loop-rig.ts): a wwn-0x<PVC-ID WWN> link in --device-dir pointing at the loop device, so every
// safety check (WWN scheme, signature probe, first-MiB check, device re-check, mount-table
// ownership) runs as it does on a node. The raw commands use the driver's mkfs options
// (mkfsCommand) and mount options (nouuid for xfs). Raw and driver runs alternate on one device so drift and
// noise from other processes hit both; the minimum column is the raw p50, the ratio driver p50 /
// raw p50. The goal: at most upstream's node plugin per case (issue figures: upstream stages an
// empty disk 6-10 ms above this floor, and tears down at 0.76-0.82x of ours before this work).
//   npx tsx bench/node.ts [--n 20] [--md]
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
import { pct, printTable, since, type Row } from './lib/table.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '20' },
    md: { type: 'boolean', default: false },
  },
});
const N = Number(values.n);
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

/** The volume as kubelet names it; the capability (its fsType) is each case's. */
const volume = {
  volumeId: `bench/bench/local-lvm/vm-9999-pvc-node`,
  publishContext: { DevicePath: `/dev/disk/by-id/wwn-0x${wwn}`, lun: String(SLOT) },
  stagingTargetPath: rig.path('plugins', 'kubernetes.io', 'csi', 'pv', 'stage'),
  targetPath: rig.path('pods', 'p1', 'volumes', 'kubernetes.io~csi', 'pv', 'mount'),
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

/** The program's CPU time (all threads) of the last driverUp: wall figures on a busy machine say
 * little, CPU time is what the driver itself spends. */
let lastUpCpu = 0;

async function driverUp(fsType: FsType): Promise<number> {
  const volumeCapability: VolumeCapability = {
    mount: { fsType, mountFlags: [], volumeMountGroup: '' },
    accessMode: { mode: 'SINGLE_NODE_WRITER' },
  };
  const c0 = cpuMs(p.pid);
  const t0 = process.hrtime.bigint();
  await stageAndPublish(c, { ...volume, volumeCapability });
  const ms = since(t0);
  lastUpCpu = cpuMs(p.pid) - c0;
  return ms;
}

/** The program's CPU time of the last driverDown. */
let lastDownCpu = 0;

async function driverDown(): Promise<number> {
  const c0 = cpuMs(p.pid);
  const t0 = process.hrtime.bigint();
  await unpublishAndUnstage(c, volume);
  const ms = since(t0);
  lastDownCpu = cpuMs(p.pid) - c0;
  return ms;
}

const fmt = (x: number) => x.toFixed(1);
const rows: Row[] = [];
const downRaw: number[] = [];
const downDriver: number[] = [];
const downCpu: number[] = [];
try {
  for (const fsType of ['ext4', 'xfs'] as const) {
    for (const existing of [false, true]) {
      if (existing) {
        await wipe();
        const [cmd, args] = mkfsCommand(disk.device, fsType);
        await run(cmd, args);
      }
      const raw: number[] = [];
      const drv: number[] = [];
      const drvCpu: number[] = [];
      for (let i = 0; i < WARM + N; i++) {
        const keep = i >= WARM;
        // Alternate which goes first, so neither always runs on a warmer cache.
        for (const which of i % 2 === 0 ? ['raw', 'driver'] : ['driver', 'raw']) {
          if (!existing) await wipe();
          if (which === 'raw') {
            const up = await rawUp(fsType, !existing);
            const down = await rawDown();
            if (keep) {
              raw.push(up);
              downRaw.push(down);
            }
          } else {
            const up = await driverUp(fsType);
            const down = await driverDown();
            if (keep) {
              drv.push(up);
              drvCpu.push(lastUpCpu);
              downDriver.push(down);
              downCpu.push(lastDownCpu);
            }
          }
        }
      }
      const base = pct(raw, 50);
      const cmds = `${existing ? '' : `mkfs.${fsType} + `}mount + mount --bind`;
      rows.push({ what: `raw ${cmds}, ${fsType}${existing ? ', has fs' : ', empty'}`, samples: raw });
      rows.push({
        what: `NodeStage + NodePublish, ${fsType}${existing ? ', has fs' : ', empty disk'}`,
        samples: drv,
        min: base,
        note: `minimum = raw p50 (raw min ${fmt(Math.min(...raw))} ms); program CPU p50 ${fmt(pct(drvCpu, 50))} ms`,
      });
    }
  }
  rows.push({ what: 'raw umount + umount (all cases)', samples: downRaw });
  rows.push({
    what: 'NodeUnpublish + NodeUnstage (all cases)',
    samples: downDriver,
    min: pct(downRaw, 50),
    note: `minimum = raw p50 (raw min ${fmt(Math.min(...downRaw))} ms); program CPU p50 ${fmt(pct(downCpu, 50))} ms`,
  });
  // What the driver does on top of the raw commands: two gRPC round trips (a CSI call is one),
  // and the signature check that keeps it from formatting or mounting a disk it must not — read
  // in-process (68 KiB at the start and the last 1544 KiB, src/os/signature.ts) on an empty disk or one
  // holding the filesystem asked for, blkid -p for anything else.
  const probe: number[] = [];
  const blkid: number[] = [];
  const quick: number[] = [];
  const bd = createLinuxBlockDevices({ exec: createExec(), driverDisks: PROXMOX_DISKS });
  for (let i = 0; i < N; i++) {
    let t0 = process.hrtime.bigint();
    await c.identity.Probe({});
    probe.push(since(t0));
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
  await p.stop();
  for (const fn of teardown) fn();
}
