// The Proxmox node backend on real loop devices, mkfs and mounts (host tier of the node side).
import t from 'tap';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { pino } from 'pino';
import { present } from '../../helpers/present.js';
import { NODE_METHODS, implemented } from '../../helpers/implemented.js';
import { createProxmoxNode } from '../../../src/proxmox/node/node.js';
import { createExec, type Exec } from '../../../src/os/exec.js';
import { isCsiError } from '../../../src/errors.js';
import type { CallContext, NodeBackend, VolumeCapability } from '../../../src/csi/types.js';
import { wwnHexForSlot as wwnForSlot } from '../../../src/proxmox/contract.js';
import { canUseLoopDevices, LoopRig } from './loop-rig.js';
import { nodePublishReq } from '../../helpers/csi-requests.js';
import { rejection } from '../../helpers/rejection.js';

const skip = canUseLoopDevices();
const MiB = 1024 * 1024;
const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const mountCap = (fsType = ''): VolumeCapability => ({
  mount: { fsType, mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
  accessType: 'mount',
});
const blockCap: VolumeCapability = { block: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' }, accessType: 'block' };

/** Online ext4 growth is an ioctl that needs CAP_SYS_RESOURCE (bit 24); some CI sandboxes drop it. */
function hasSysResource(): boolean {
  const eff = /CapEff:\s*([0-9a-f]+)/.exec(fs.readFileSync('/proc/self/status', 'utf8'))?.[1];
  return eff !== undefined && (BigInt(`0x${eff}`) & (1n << 24n)) !== 0n;
}

function recordingExec(): Exec & { cmds: string[][] } {
  const real = createExec();
  const cmds: string[][] = [];
  return { cmds, run: (c, a, o) => (cmds.push([c, ...a]), real.run(c, a, o)) };
}

/** One plugin process of node talos-w1 (zone hyper1) on the rig's devices and kubelet directory. */
function plugin(rig: LoopRig, exec?: Exec) {
  const node: NodeBackend = createProxmoxNode({
    nodeId: 'talos-w1',
    region: 'homelab',
    zone: 'hyper1',
    deviceDir: rig.devDir,
    kubeletDir: rig.root,
    log: pino({ level: 'silent' }),
    ...(exec && { exec }),
    nodeLabels: null,
    deviceWaitMs: 1500,
  });
  return implemented(node, NODE_METHODS);
}

function setup(t: { teardown(fn: () => void): void }) {
  const rig = new LoopRig(t);
  const exec = recordingExec();
  const node = plugin(rig, exec);
  const mkfsCount = () => exec.cmds.filter((c) => c[0]?.startsWith('mkfs')).length;
  return { rig, exec, node, mkfsCount };
}

const publishCtx = (slot: number) => ({ DevicePath: `/dev/disk/by-id/wwn-0x${wwnForSlot(slot)}`, lun: String(slot) });
const code = (e: unknown) => (isCsiError(e) ? e.kind : `not a CsiError: ${String(e)}`);

t.test('filesystem volume: stage, publish, data survives unstage/restage, expand', { skip }, async (t) => {
  const { rig, node, mkfsCount } = setup(t);
  const disk = rig.addDisk(512 * MiB, wwnForSlot(3));
  const staging = rig.path('staging', 'vol-a');
  const target = rig.path('pods', 'p1', 'volumes', 'vol-a', 'mount');
  const volumeId = 'homelab/hyper1/local-lvm/vm-9999-pvc-a';
  const stageReq = {
    volumeId,
    publishContext: publishCtx(3),
    stagingTargetPath: staging,
    volumeCapability: mountCap('ext4'),
    secrets: {},
    volumeContext: { blockSize: '4096', inodeSize: '256' },
  };

  const info = await node.nodeGetInfo(ctx);
  t.equal(info.nodeId, 'talos-w1');
  t.equal(info.maxVolumesPerNode, 30, 'no foreign SCSI disks on this host');
  t.same(info.accessibleTopology?.segments, {
    'topology.kubernetes.io/region': 'homelab',
    'topology.kubernetes.io/zone': 'hyper1',
  });

  await node.nodeStageVolume(stageReq, ctx);
  t.equal(mkfsCount(), 1, 'empty disk formatted once');
  t.ok(rig.mountsUnderRoot().includes(staging), 'staged');
  await node.nodeStageVolume(stageReq, ctx);
  t.equal(mkfsCount(), 1, 'second stage is a no-op');

  const pubReq = {
    volumeId,
    publishContext: publishCtx(3),
    stagingTargetPath: staging,
    targetPath: target,
    volumeCapability: mountCap('ext4'),
    readonly: false,
    secrets: {},
    volumeContext: {},
  };
  await node.nodePublishVolume(pubReq, ctx);
  await node.nodePublishVolume(pubReq, ctx);
  fs.writeFileSync(`${target}/hello.txt`, 'kept across restage');
  t.equal(fs.readFileSync(`${staging}/hello.txt`, 'utf8'), 'kept across restage', 'target is the staged filesystem');

  const roTarget = rig.path('pods', 'p2', 'mount');
  await node.nodePublishVolume({ ...pubReq, targetPath: roTarget, readonly: true }, ctx);
  t.throws(() => fs.writeFileSync(`${roTarget}/nope`, 'x'), { code: 'EROFS' }, 'read-only publish is read-only');
  t.equal(
    code(await rejection(node.nodePublishVolume({ ...pubReq, targetPath: roTarget, readonly: false }, ctx))),
    'AlreadyExists',
    'same target, other ro flag',
  );

  const stats = await node.nodeGetVolumeStats({ volumeId, volumePath: target, stagingTargetPath: '' }, ctx);
  const bytes = present(
    stats.usage?.find((u) => u.unit === 'BYTES'),
    'BYTES usage',
  );
  const inodes = present(
    stats.usage?.find((u) => u.unit === 'INODES'),
    'INODES usage',
  );
  t.ok(Number(bytes.total) > 400 * MiB && Number(bytes.total) <= 512 * MiB, `bytes total ${String(bytes.total)}`);
  t.ok(Number(inodes.used) > 0 && Number(inodes.total) > Number(inodes.used));
  t.equal(stats.volumeCondition?.abnormal, false);
  t.equal(
    code(
      await rejection(node.nodeGetVolumeStats({ volumeId, volumePath: rig.path('nope'), stagingTargetPath: '' }, ctx)),
    ),
    'NotFound',
  );
  t.equal(
    code(await rejection(node.nodeGetVolumeStats({ volumeId, volumePath: 'some/path', stagingTargetPath: '' }, ctx))),
    'NotFound',
    'a relative path: no volume there (csi-sanity)',
  );

  await node.nodeUnpublishVolume({ volumeId, targetPath: roTarget }, ctx);
  await node.nodeUnpublishVolume({ volumeId, targetPath: target }, ctx);
  t.notOk(fs.existsSync(target), 'target removed');
  t.notOk(fs.existsSync(roTarget), 'ro target removed');
  await node.nodeUnpublishVolume({ volumeId, targetPath: target }, ctx);
  t.pass('unpublish of a missing target is OK');

  await node.nodeUnstageVolume({ volumeId, stagingTargetPath: staging }, ctx);
  t.notOk(rig.mountsUnderRoot().includes(staging), 'unstaged');
  await node.nodeUnstageVolume({ volumeId, stagingTargetPath: staging }, ctx);
  await node.nodeUnstageVolume({ volumeId, stagingTargetPath: rig.path('never-existed') }, ctx);
  t.pass('unstage is idempotent');

  t.equal(code(await rejection(node.nodePublishVolume(pubReq, ctx))), 'FailedPrecondition', 'publish before stage');

  await node.nodeStageVolume(stageReq, ctx);
  t.equal(mkfsCount(), 1, 'restage did not reformat');
  await node.nodePublishVolume(pubReq, ctx);
  t.equal(fs.readFileSync(`${target}/hello.txt`, 'utf8'), 'kept across restage', 'data survived');

  const mismatch = await rejection(
    node.nodeStageVolume(
      { ...stageReq, stagingTargetPath: rig.path('staging', 'other'), volumeCapability: mountCap('xfs') },
      ctx,
    ),
  );
  t.equal(code(mismatch), 'FailedPrecondition', 'an ext4 disk is never turned into xfs');
  t.match(mismatch.message, /already holds a ext4 filesystem but xfs was requested/);
  t.equal(mkfsCount(), 1);

  rig.grow(disk, 768 * MiB);
  const expandReq = {
    volumeId,
    volumePath: target,
    capacityRange: { requiredBytes: String(768 * MiB), limitBytes: '0' },
    stagingTargetPath: '',
    volumeCapability: null,
    secrets: {},
  };
  if (hasSysResource()) {
    const exp = await node.nodeExpandVolume(expandReq, ctx);
    t.equal(Number(exp.capacityBytes), 768 * MiB, 'NodeExpand reports the new size');
    const after = await node.nodeGetVolumeStats({ volumeId, volumePath: target, stagingTargetPath: '' }, ctx);
    t.ok(Number(after.usage?.find((u) => u.unit === 'BYTES')?.total) > 600 * MiB, 'filesystem grew');
  } else {
    // This sandbox lacks CAP_SYS_RESOURCE, so the kernel refuses online ext4 growth; the node
    // plugin runs privileged in a cluster. What we can check here is that the error says so.
    const err = await rejection(node.nodeExpandVolume(expandReq, ctx));
    t.equal(code(err), 'FailedPrecondition');
    t.match(err.message, /CAP_SYS_RESOURCE/);
  }
  t.equal(fs.readFileSync(`${target}/hello.txt`, 'utf8'), 'kept across restage', 'data intact after resize');

  await node.nodeUnpublishVolume({ volumeId, targetPath: target }, ctx);
  await node.nodeUnstageVolume({ volumeId, stagingTargetPath: staging }, ctx);
  t.same(rig.mountsUnderRoot(), [], 'nothing left mounted');
});

t.test('xfs volume with blockSize/inodeSize, nouuid, online grow', { skip }, async (t) => {
  const { rig, node } = setup(t);
  const disk = rig.addDisk(512 * MiB, wwnForSlot(4));
  const volumeId = 'homelab/hyper1/local-lvm/vm-9999-pvc-x';
  const staging = rig.path('staging', 'vol-x');
  const target = rig.path('pods', 'px', 'mount');
  await node.nodeStageVolume(
    {
      volumeId,
      publishContext: publishCtx(4),
      stagingTargetPath: staging,
      volumeCapability: mountCap('xfs'),
      secrets: {},
      volumeContext: { blockSize: '4096', inodeSize: '512' },
    },
    ctx,
  );
  t.match(sh('blkid', ['-p', '-o', 'export', disk.device]), /TYPE=xfs/);
  t.match(sh('xfs_info', [staging]), /isize=512/, 'inode size applied');
  t.match(sh('xfs_info', [staging]), /bsize=4096/, 'block size applied');
  t.match(sh('findmnt', ['-n', '-o', 'OPTIONS', staging]), /nouuid/, 'mounted with nouuid');
  await node.nodePublishVolume(
    nodePublishReq({
      volumeId,
      publishContext: publishCtx(4),
      stagingTargetPath: staging,
      targetPath: target,
      volumeCapability: mountCap('xfs'),
    }),
    ctx,
  );
  rig.grow(disk, 1024 * MiB);
  const exp = await node.nodeExpandVolume(
    {
      volumeId,
      volumePath: target,
      capacityRange: null,
      stagingTargetPath: staging,
      volumeCapability: null,
      secrets: {},
    },
    ctx,
  );
  t.equal(Number(exp.capacityBytes), 1024 * MiB);
  const st = await node.nodeGetVolumeStats({ volumeId, volumePath: target, stagingTargetPath: '' }, ctx);
  t.ok(Number(st.usage?.[0]?.total) > 900 * MiB, 'xfs grew');
  await node.nodeUnpublishVolume({ volumeId, targetPath: target }, ctx);
  await node.nodeUnstageVolume({ volumeId, stagingTargetPath: staging }, ctx);
});

t.test('block volume: no filesystem, device bound onto a file, sized, expanded', { skip }, async (t) => {
  const { rig, node, mkfsCount } = setup(t);
  const disk = rig.addDisk(64 * MiB, wwnForSlot(5));
  const volumeId = 'homelab/hyper1/local-lvm/vm-9999-pvc-b';
  const staging = rig.path('staging', 'vol-b');
  const target = rig.path('pods', 'pb', 'volumeDevices', 'vol-b');
  const base = {
    volumeId,
    publishContext: publishCtx(5),
    stagingTargetPath: staging,
    volumeCapability: blockCap,
    secrets: {},
    volumeContext: {},
  };
  await node.nodeStageVolume(base, ctx);
  t.equal(mkfsCount(), 0, 'block volumes are never formatted');
  t.same(rig.mountsUnderRoot(), [], 'stage mounts nothing');
  const pub = { ...base, targetPath: target, readonly: false };
  await node.nodePublishVolume(pub, ctx);
  await node.nodePublishVolume(pub, ctx);
  t.ok(fs.statSync(target).isBlockDevice(), 'target is the device');
  t.equal(fs.statSync(target).rdev, fs.statSync(disk.device).rdev, 'the right device');
  const fd = fs.openSync(target, 'r+');
  fs.writeSync(fd, Buffer.from('raw bytes'), 0, 9, 4096);
  fs.closeSync(fd);
  const check = Buffer.alloc(9);
  const fd2 = fs.openSync(disk.file, 'r');
  fs.readSync(fd2, check, 0, 9, 4096);
  fs.closeSync(fd2);
  t.equal(check.toString(), 'raw bytes', 'writes reach the disk');

  const st = await node.nodeGetVolumeStats({ volumeId, volumePath: target, stagingTargetPath: staging }, ctx);
  t.same(st.usage, [{ unit: 'BYTES', total: 64 * MiB }]);
  t.equal(st.volumeCondition?.abnormal, false);

  rig.grow(disk, 96 * MiB);
  const exp = await node.nodeExpandVolume(
    {
      volumeId,
      volumePath: target,
      capacityRange: { requiredBytes: String(96 * MiB), limitBytes: '0' },
      stagingTargetPath: '',
      volumeCapability: null,
      secrets: {},
    },
    ctx,
  );
  t.equal(Number(exp.capacityBytes), 96 * MiB);

  rig.addDisk(64 * MiB, wwnForSlot(6));
  t.equal(
    code(await rejection(node.nodePublishVolume({ ...pub, publishContext: publishCtx(6) }, ctx))),
    'AlreadyExists',
    'target holds another device',
  );

  await node.nodeUnpublishVolume({ volumeId, targetPath: target }, ctx);
  t.notOk(fs.existsSync(target), 'target file removed');
  await node.nodeUnstageVolume({ volumeId, stagingTargetPath: staging }, ctx);
  t.same(rig.mountsUnderRoot(), []);
});

t.test('stage refuses a staging path that holds another disk, and a disk that is not there', { skip }, async (t) => {
  const { rig, node } = setup(t);
  rig.addDisk(64 * MiB, wwnForSlot(7));
  rig.addDisk(64 * MiB, wwnForSlot(8));
  const staging = rig.path('staging', 'shared');
  const req = (slot: number) => ({
    volumeId: `v${slot}`,
    publishContext: publishCtx(slot),
    stagingTargetPath: staging,
    volumeCapability: mountCap('ext4'),
    secrets: {},
    volumeContext: {},
  });
  await node.nodeStageVolume(req(7), ctx);
  t.equal(code(await rejection(node.nodeStageVolume(req(8), ctx))), 'FailedPrecondition');
  const started = Date.now();
  const missing = await rejection(
    node.nodeStageVolume({ ...req(9), stagingTargetPath: rig.path('staging', 'm') }, ctx),
  );
  t.equal(code(missing), 'NotFound');
  t.match(missing.message, /WWN 0x5056432d49443039 \(scsi9\)/);
  t.ok(Date.now() - started >= 1400, 'waited the bounded time for the disk');
  await node.nodeUnstageVolume({ volumeId: 'v7', stagingTargetPath: staging }, ctx);
});

t.test(
  'SINGLE_NODE_SINGLE_WRITER: one target at a time, read from the mount table; MULTI_WRITER shares',
  { skip },
  async (t) => {
    const { rig, node } = setup(t);
    rig.addDisk(128 * MiB, wwnForSlot(11));
    rig.addDisk(128 * MiB, wwnForSlot(12));
    const withMode = (c: VolumeCapability, mode: string): VolumeCapability => ({
      ...c,
      accessMode: { mode: mode as never },
    });
    const modes = {
      single: withMode(mountCap('ext4'), 'SINGLE_NODE_SINGLE_WRITER'),
      multi: withMode(mountCap('ext4'), 'SINGLE_NODE_MULTI_WRITER'),
      blockSingle: withMode(blockCap, 'SINGLE_NODE_SINGLE_WRITER'),
      blockMulti: withMode(blockCap, 'SINGLE_NODE_MULTI_WRITER'),
    };
    t.ok(node.capabilities.includes('SINGLE_NODE_MULTI_WRITER'), 'advertised');
    /** A fresh plugin process on the same host: no memory of earlier calls. */
    const restart = () => plugin(rig);

    /** Publishes the volume staged at `stagingTargetPath` from `slot` to a target, through a plugin process. */
    const publisher =
      (volumeId: string, slot: number, stagingTargetPath: string) =>
      (targetPath: string, volumeCapability: VolumeCapability, n = node) =>
        n.nodePublishVolume(
          nodePublishReq({
            volumeId,
            publishContext: publishCtx(slot),
            stagingTargetPath,
            targetPath,
            volumeCapability,
          }),
          ctx,
        );

    // Filesystem volume on slot 11.
    const volumeId = 'homelab/hyper1/local-lvm/vm-9999-pvc-rwop';
    const staging = rig.path('staging', 'rwop');
    const stage = {
      volumeId,
      publishContext: publishCtx(11),
      stagingTargetPath: staging,
      volumeCapability: modes.single,
      secrets: {},
      volumeContext: {},
    };
    await node.nodeStageVolume(stage, ctx);
    const pub = publisher(volumeId, 11, staging);
    const a = rig.path('pods', 'a', 'mount');
    const b = rig.path('pods', 'b', 'mount');
    await pub(a, modes.single);
    await pub(a, modes.single);
    t.pass('the same target again is idempotent');
    const refused = await rejection(pub(b, modes.single));
    t.equal(code(refused), 'FailedPrecondition', 'a second target is refused');
    t.match(refused.message, new RegExp(`already published at ${a}`));
    t.notOk(fs.existsSync(b), 'nothing created at the refused target');

    // A restarted plugin has no memory of the first publish: the mount table still says it.
    t.equal(
      code(await rejection(pub(b, modes.single, restart()))),
      'FailedPrecondition',
      'still refused after a restart',
    );

    // Another volume's mounts do not count.
    const other = 'homelab/hyper1/local-lvm/vm-9999-pvc-other';
    const otherStaging = rig.path('staging', 'other');
    await node.nodeStageVolume(
      { ...stage, volumeId: other, publishContext: publishCtx(12), stagingTargetPath: otherStaging },
      ctx,
    );
    await node.nodePublishVolume(
      nodePublishReq({
        volumeId: other,
        publishContext: publishCtx(12),
        stagingTargetPath: otherStaging,
        targetPath: b,
        volumeCapability: modes.single,
      }),
      ctx,
    );
    t.pass('a single-writer volume next to another one publishes');
    await node.nodeUnpublishVolume({ volumeId: other, targetPath: b }, ctx);
    await node.nodeUnstageVolume({ volumeId: other, stagingTargetPath: otherStaging }, ctx);

    await node.nodeUnpublishVolume({ volumeId, targetPath: a }, ctx);
    await pub(b, modes.single);
    t.pass('after unpublishing the first target, another one is fine');
    await node.nodeUnpublishVolume({ volumeId, targetPath: b }, ctx);

    await pub(a, modes.multi);
    await pub(b, modes.multi);
    fs.writeFileSync(`${a}/shared.txt`, 'one filesystem');
    t.equal(
      fs.readFileSync(`${b}/shared.txt`, 'utf8'),
      'one filesystem',
      'SINGLE_NODE_MULTI_WRITER: both targets see the same filesystem',
    );
    t.equal(
      code(await rejection(pub(rig.path('pods', 'c', 'mount'), modes.single))),
      'FailedPrecondition',
      'a single-writer publish next to shared ones is refused',
    );
    await node.nodeUnpublishVolume({ volumeId, targetPath: a }, ctx);
    await node.nodeUnpublishVolume({ volumeId, targetPath: b }, ctx);
    await node.nodeUnstageVolume({ volumeId, stagingTargetPath: staging }, ctx);

    // Raw block volume on a fresh disk.
    const disk = rig.addDisk(64 * MiB, wwnForSlot(13));
    const blockId = 'homelab/hyper1/local-lvm/vm-9999-pvc-rawop';
    const bStaging = rig.path('staging', 'rawop');
    await node.nodeStageVolume(
      {
        volumeId: blockId,
        publishContext: publishCtx(13),
        stagingTargetPath: bStaging,
        volumeCapability: modes.blockSingle,
        secrets: {},
        volumeContext: {},
      },
      ctx,
    );
    const bpub = publisher(blockId, 13, bStaging);
    const ba = rig.path('pods', 'a', 'dev');
    const bb = rig.path('pods', 'b', 'dev');
    await bpub(ba, modes.blockSingle);
    await bpub(ba, modes.blockSingle);
    t.equal(fs.statSync(ba).rdev, fs.statSync(disk.device).rdev);
    const bRefused = await rejection(bpub(bb, modes.blockSingle));
    t.equal(code(bRefused), 'FailedPrecondition', 'block: a second target is refused');
    t.match(bRefused.message, new RegExp(`already published at ${ba}`));
    t.equal(
      code(await rejection(bpub(bb, modes.blockSingle, restart()))),
      'FailedPrecondition',
      'block: still refused after a restart',
    );
    t.notOk(fs.existsSync(bb));
    await node.nodeUnpublishVolume({ volumeId: blockId, targetPath: ba }, ctx);
    await bpub(ba, modes.blockMulti);
    await bpub(bb, modes.blockMulti);
    t.equal(fs.statSync(bb).rdev, fs.statSync(disk.device).rdev, 'block SINGLE_NODE_MULTI_WRITER: two targets');
    await node.nodeUnpublishVolume({ volumeId: blockId, targetPath: ba }, ctx);
    await node.nodeUnpublishVolume({ volumeId: blockId, targetPath: bb }, ctx);
    t.same(rig.mountsUnderRoot(), [], 'nothing left mounted');
  },
);

function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8' });
}
