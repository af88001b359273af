// Proxmox node logic against fakes: the decisions that real disks cannot easily provoke.
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { createProxmoxNode } from '../../../../src/proxmox/node/node.js';
import { diskFromPublishContext } from '../../../../src/proxmox/node/wwn.js';
import { isCsiError } from '../../../../src/errors.js';
import { createLinuxMounter } from '../../../../src/os/mounter.js';
import type { CallContext, VolumeCapability } from '../../../../src/csi/types.js';
import { FakeSystem, fail, parseMount } from '../../os/fakes.js';
import { FakeDisks } from './fake-disks.js';
import { rejection } from '../../../helpers/rejection.js';
import { NODE_METHODS, implemented } from '../../../helpers/implemented.js';
import { present } from '../../../helpers/present.js';
import { fakeClock } from '../../../helpers/fake-clock.js';

const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const WWN3 = '5056432d49443033';
const code = (e: unknown) => (isCsiError(e) ? e.kind : `not a CsiError: ${String(e)}`);
const cap = (
  fsType = '',
  mode: 'SINGLE_NODE_WRITER' | 'SINGLE_NODE_READER_ONLY' = 'SINGLE_NODE_WRITER',
): VolumeCapability => ({
  mount: { fsType, mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode },
  accessType: 'mount',
});

function setup(
  t: { teardown(fn: () => void): void },
  o: { labels?: Record<string, string>; region?: string; zone?: string; maxVolumes?: number } = {},
) {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'pve-node-test-')));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const sys = new FakeSystem();
  const disks = new FakeDisks();
  const node = implemented(
    createProxmoxNode({
      nodeId: 'talos-w1',
      region: o.region,
      zone: o.zone,
      maxVolumes: o.maxVolumes,
      log: pino({ level: 'silent' }),
      exec: sys,
      mounter: createLinuxMounter({ exec: sys, mountinfo: sys.mountinfo }),
      blockDevices: disks,
      nodeLabels: o.labels ? async () => o.labels ?? {} : null,
      deviceWaitMs: 300,
      kubeletDir: dir,
    }),
    NODE_METHODS,
  );
  const stage = (extra: Record<string, unknown> = {}) => ({
    volumeId: 'homelab/hyper1/local-lvm/vm-9999-pvc-1',
    publishContext: { DevicePath: `/dev/disk/by-id/wwn-0x${WWN3}`, lun: '3' },
    stagingTargetPath: path.join(dir, 'staging'),
    volumeCapability: cap('ext4'),
    secrets: {},
    volumeContext: {},
    ...extra,
  });
  return { dir, sys, disks, node, stage };
}

t.test('publish context: DevicePath first, lun as fallback, clear errors otherwise', async (t) => {
  t.same(diskFromPublishContext({ DevicePath: `/dev/disk/by-id/wwn-0x${WWN3.toUpperCase()}`, lun: '3' }, 'v'), {
    wwn: WWN3,
    lun: 3,
  });
  t.same(
    diskFromPublishContext({ devicepath: `/dev/disk/by-id/wwn-0x${WWN3}` }, 'v'),
    { wwn: WWN3 },
    'keys are case-insensitive',
  );
  t.same(diskFromPublishContext({ lun: '3' }, 'v'), { wwn: WWN3, lun: 3 }, 'slot → PVC-ID03');
  t.throws(() => diskFromPublishContext({}, 'vol-1'), {
    kind: 'InvalidArgument',
    message: /vol-1.*neither DevicePath nor lun/,
  });
  t.throws(() => diskFromPublishContext({ DevicePath: '/dev/sdb' }, 'v'), {
    kind: 'InvalidArgument',
    message: /wwn-0x/,
  });
  t.throws(() => diskFromPublishContext({ lun: '31' }, 'v'), { kind: 'InvalidArgument', message: /slot 1\.\.30/ });
});

t.test('NodeGetInfo: topology from labels (Proxmox labels win), slots left', async (t) => {
  const { node, disks } = setup(t, {
    labels: {
      'topology.kubernetes.io/region': 'k8s-region',
      'topology.kubernetes.io/zone': 'hyper1',
      'topology.proxmox.sinextra.dev/region': 'homelab',
    },
    region: 'flag-region',
    zone: 'flag-zone',
  });
  disks.foreign = 2;
  const info = await node.nodeGetInfo(ctx);
  t.same(info, {
    nodeId: 'talos-w1',
    maxVolumesPerNode: 28,
    accessibleTopology: {
      segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper1' },
    },
  });
  disks.foreign = 30;
  t.equal((await node.nodeGetInfo(ctx)).maxVolumesPerNode, 1, 'never 0, which would mean unlimited');
});

t.test('NodeGetInfo: --max-volumes-per-node lowers the limit, never raises it past the free slots', async (t) => {
  const { node, disks } = setup(t, { region: 'homelab', zone: 'hyper1', maxVolumes: 4 });
  t.equal((await node.nodeGetInfo(ctx)).maxVolumesPerNode, 4, 'the operator limit, 30 slots free');
  disks.foreign = 27;
  t.equal((await node.nodeGetInfo(ctx)).maxVolumesPerNode, 3, 'only 3 slots free: the slots win');
  disks.foreign = 30;
  t.equal((await node.nodeGetInfo(ctx)).maxVolumesPerNode, 1, 'still never 0');
});

t.test('NodeGetInfo without any topology is a clear FailedPrecondition', async (t) => {
  const { node } = setup(t, { labels: {} });
  const err = await rejection(node.nodeGetInfo(ctx));
  t.equal(code(err), 'FailedPrecondition');
  t.match(err.message, /topology\.kubernetes\.io\/region/);
  const flagsOnly = setup(t, { region: 'homelab' });
  t.match((await rejection(flagsOnly.node.nodeGetInfo(ctx))).message, /--region and --zone/);
});

t.test('stage never formats a disk with a partition table, or a read-only one', async (t) => {
  const { node, disks, stage } = setup(t);
  disks.add(WWN3, '/dev/sdx', '8:16', { ptType: 'gpt' });
  const err = await rejection(node.nodeStageVolume(stage(), ctx));
  t.equal(code(err), 'FailedPrecondition');
  t.match(err.message, /gpt partition table/);
  disks.disk(WWN3).probe = {};
  t.equal(
    code(
      await rejection(node.nodeStageVolume(stage({ volumeCapability: cap('ext4', 'SINGLE_NODE_READER_ONLY') }), ctx)),
    ),
    'FailedPrecondition',
  );
  t.same(disks.formats, []);
});

t.test('stage asks blkid nothing when the disk reads as empty or as the filesystem asked for', async (t) => {
  const { node, disks, stage, sys } = setup(t);
  disks.add(WWN3, '/dev/sdx', '8:16');
  disks.signatures.set('/dev/sdx', { kind: 'empty' });
  await node.nodeStageVolume(stage(), ctx);
  t.same(disks.formats, [['/dev/sdx', 'ext4', {}]], 'formatted');
  t.equal(disks.probes, 0, 'no blkid for an empty disk');
  // Staged again elsewhere (as after a restart of the node): now the disk holds ext4.
  await node.nodeStageVolume(stage({ stagingTargetPath: `${stage().stagingTargetPath}-2` }), ctx);
  t.equal(disks.formats.length, 1, 'the filesystem it now holds is mounted, not formatted again');
  t.equal(disks.probes, 0, 'no blkid for the filesystem asked for');
  t.same(
    sys.commands.filter((c) => c[0] === 'mount').map((c) => c.slice(0, 3)),
    [
      ['mount', '-t', 'ext4'],
      ['mount', '-t', 'ext4'],
    ],
  );
});

t.test('a foreign signature is refused: anything but empty or the asked-for filesystem goes to blkid', async (t) => {
  const { node, disks, stage, sys } = setup(t);
  disks.add(WWN3, '/dev/sdx', '8:16', { fsType: 'swap' });
  disks.signatures.set('/dev/sdx', { kind: 'unknown' });
  const err = await rejection(node.nodeStageVolume(stage(), ctx));
  t.equal(code(err), 'FailedPrecondition');
  t.match(err.message, /already holds a swap filesystem but ext4 was requested/);
  t.equal(disks.probes, 1, 'blkid decided');
  // The in-process read found xfs but ext4 is asked for: blkid, not the fast path, answers.
  disks.disk(WWN3).probe = { fsType: 'xfs' };
  disks.signatures.set('/dev/sdx', { kind: 'fs', fsType: 'xfs' });
  const other = await rejection(node.nodeStageVolume(stage(), ctx));
  t.match(other.message, /already holds a xfs filesystem but ext4 was requested/);
  t.equal(disks.probes, 2, 'blkid decided');
  t.same(disks.formats, [], 'nothing formatted');
  t.same(
    sys.commands.filter((c) => c[0] === 'mount'),
    [],
    'nothing mounted',
  );
});

t.test('stage validates fsType and format parameters before touching the disk', async (t) => {
  const { node, disks, stage } = setup(t);
  disks.add(WWN3, '/dev/sdx', '8:16');
  const bad = await rejection(node.nodeStageVolume(stage({ volumeCapability: cap('btrfs') }), ctx));
  t.equal(code(bad), 'InvalidArgument');
  t.match(bad.message, /btrfs.*ext4 or xfs/);
  const bs = await rejection(node.nodeStageVolume(stage({ volumeContext: { blockSize: '3000' } }), ctx));
  t.equal(code(bs), 'InvalidArgument');
  t.match(bs.message, /blockSize="3000"/);
  t.same(disks.formats, []);
});

t.test('stage formats with the volume context parameters and the fstype from the context', async (t) => {
  const { node, disks, stage, sys } = setup(t);
  disks.add(WWN3, '/dev/sdx', '8:16');
  await node.nodeStageVolume(
    stage({
      volumeCapability: cap(''),
      volumeContext: { 'csi.storage.k8s.io/fstype': 'xfs', blockSize: '4096', inodeSize: '512' },
    }),
    ctx,
  );
  t.same(disks.formats, [['/dev/sdx', 'xfs', { blockSize: 4096, inodeSize: 512 }]]);
  t.same(sys.commands.find((c) => c[0] === 'mount')?.slice(0, 5), ['mount', '-t', 'xfs', '-o', 'nouuid']);
});

t.test('concurrent stage calls for one volume format once', async (t) => {
  const { node, disks, stage, sys } = setup(t);
  disks.add(WWN3, '/dev/sdx', '8:16');
  disks.formatDelayMs = 100;
  // The fake mount table has no real device numbers; give staged mounts the disk's.
  sys.intercept((cmd, args) => {
    if (cmd === 'mount' && args[0] === '-t') {
      const m = present(parseMount(args), `mount ${args.join(' ')}`);
      sys.addMount({ target: m.target, source: m.source, fstype: m.fstype, majMin: '8:16' });
      return Promise.resolve({ stdout: '', stderr: '', exitCode: 0 });
    }
    return undefined;
  });
  await Promise.all([
    node.nodeStageVolume(stage(), ctx),
    node.nodeStageVolume(stage(), ctx),
    node.nodeStageVolume(stage(), ctx),
  ]);
  t.equal(disks.formats.length, 1);
  t.equal(sys.commands.filter((c) => c[0] === 'mount').length, 1, 'mounted once; the others saw it mounted');
});

t.test('a disk that never shows up is NotFound naming WWN, slot and where we looked', async (t) => {
  const { node, stage } = setup(t);
  const err = await rejection(node.nodeStageVolume(stage(), ctx));
  t.equal(code(err), 'NotFound');
  t.match(err.message, /WWN 0x5056432d49443033 \(scsi3\).*\/sys\/bus\/scsi\/devices.*wwn-0x5056432d49443033/);
});

t.test('unstage of a busy staging path says so', async (t) => {
  const { node, sys, stage } = setup(t);
  const staging = stage().stagingTargetPath;
  sys.addMount({ target: staging, source: '/dev/sdx', fstype: 'ext4', majMin: '8:16' });
  sys.intercept((cmd, args) =>
    cmd === 'umount' ? Promise.reject(fail(cmd, args, 32, `umount: ${staging}: target is busy.`)) : undefined,
  );
  const err = await rejection(node.nodeUnstageVolume({ volumeId: 'v', stagingTargetPath: staging }, ctx));
  t.equal(code(err), 'FailedPrecondition');
  t.match(err.message, /still in use/);
});

t.test(
  "foreign mounts: a disk without a PVC-ID WWN is never unmounted, a foreign NFS mount never stat'ed",
  async (t) => {
    const { node, sys, disks, stage, dir } = setup(t);
    disks.add('5000c500a1b2c3d4', '/dev/sda', '8:0');
    const staging = stage().stagingTargetPath;
    fs.mkdirSync(staging, { recursive: true });
    sys.addMount({ target: staging, source: '/dev/sda', fstype: 'ext4', majMin: '8:0' });
    const err = await rejection(node.nodeUnstageVolume({ volumeId: 'v', stagingTargetPath: staging }, ctx));
    t.equal(code(err), 'FailedPrecondition');
    t.match(err.message, /not attached by this driver/);
    t.same(
      sys.commands.filter((c) => c[0] === 'umount'),
      [],
      'the host disk stays mounted',
    );

    disks.add(WWN3, '/dev/sdc', '8:32');
    const target = path.join(dir, 'pods', 'p', 'dev');
    fs.mkdirSync(target, { recursive: true });
    sys.addMount({ target, source: 'nas:/dead', fstype: 'nfs4' });
    const statted: string[] = [];
    const majMinOf = disks.majMinOf.bind(disks);
    disks.majMinOf = async (p: string) => (statted.push(p), majMinOf(p));
    const pub = await rejection(
      node.nodePublishVolume(
        {
          ...stage(),
          targetPath: target,
          volumeCapability: { block: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' }, accessType: 'block' },
          readonly: false,
        },
        ctx,
      ),
    );
    t.equal(code(pub), 'AlreadyExists');
    t.notOk(statted.includes(target), "the dead NFS mount at the target was not stat'ed");
    const unpub = await rejection(node.nodeUnpublishVolume({ volumeId: 'v', targetPath: target }, ctx));
    t.equal(code(unpub), 'FailedPrecondition', 'nor unmounted');
    t.same(
      sys.commands.filter((c) => c[0] === 'umount'),
      [],
    );
  },
);

t.test('unpublish refuses to delete a target that is not a mount point but has files', async (t) => {
  const { node, dir } = setup(t);
  const target = path.join(dir, 'target');
  fs.mkdirSync(target);
  fs.writeFileSync(path.join(target, 'precious'), 'x');
  const err = await rejection(node.nodeUnpublishVolume({ volumeId: 'v', targetPath: target }, ctx));
  t.equal(code(err), 'FailedPrecondition');
  t.ok(fs.existsSync(path.join(target, 'precious')), 'files untouched');
});

t.test('stats: abnormal when the disk is gone or the mount broken', async (t) => {
  const { node, disks, sys, dir } = setup(t);
  disks.add(WWN3, '/dev/sdx', '8:16');
  const target = path.join(dir, 'pub');
  fs.mkdirSync(target);
  sys.addMount({ target, source: '/dev/sdx', fstype: 'ext4', majMin: '8:16' });
  const ok = await node.nodeGetVolumeStats({ volumeId: 'v', volumePath: target, stagingTargetPath: '' }, ctx);
  t.equal(ok.volumeCondition?.abnormal, false);
  t.equal(ok.usage?.length, 2);
  disks.gone.add('8:16');
  const gone = await node.nodeGetVolumeStats({ volumeId: 'v', volumePath: target, stagingTargetPath: '' }, ctx);
  t.equal(gone.volumeCondition?.abnormal, true);
  t.match(gone.volumeCondition?.message, /no longer attached/);
  t.equal(gone.usage?.length, 1, 'still one usage entry so kubelet keeps the condition');
  sys.intercept((cmd, args) =>
    cmd === 'stat' && args.includes(target)
      ? Promise.reject(fail(cmd, args, 1, `stat: cannot statx '${target}': Input/output error`))
      : undefined,
  );
  const broken = await node.nodeGetVolumeStats({ volumeId: 'v', volumePath: target, stagingTargetPath: '' }, ctx);
  t.equal(broken.volumeCondition?.abnormal, true);
  t.match(broken.volumeCondition?.message, /EIO/);
  const notMounted = path.join(dir, 'plain');
  fs.mkdirSync(notMounted);
  t.equal(
    code(
      await rejection(node.nodeGetVolumeStats({ volumeId: 'v', volumePath: notMounted, stagingTargetPath: '' }, ctx)),
    ),
    'NotFound',
  );
});

t.test('expand waits for the new size, then says it has not arrived', async (t) => {
  fakeClock(t);
  const { node, disks, sys, dir } = setup(t);
  disks.add(WWN3, '/dev/sdx', '8:16', { fsType: 'ext4' }, 1 << 30);
  const target = path.join(dir, 'pub');
  fs.mkdirSync(target);
  sys.addMount({ target, source: '/dev/sdx', fstype: 'ext4', majMin: '8:16' });
  const req = {
    volumeId: 'v',
    volumePath: target,
    capacityRange: { requiredBytes: String(2 ** 31), limitBytes: '0' },
    stagingTargetPath: '',
    volumeCapability: null,
    secrets: {},
  };
  setTimeout(() => (disks.disk(WWN3).size = 2 ** 31), 100);
  t.equal(Number((await node.nodeExpandVolume(req, ctx)).capacityBytes), 2 ** 31);
  const err = await rejection(
    node.nodeExpandVolume({ ...req, capacityRange: { requiredBytes: String(2 ** 32), limitBytes: '0' } }, ctx),
  );
  t.equal(code(err), 'Unavailable');
  t.match(err.message, /has not reached this VM yet/);
  t.equal(
    code(await rejection(node.nodeExpandVolume({ ...req, volumePath: path.join(dir, 'nope') }, ctx))),
    'NotFound',
  );
});
