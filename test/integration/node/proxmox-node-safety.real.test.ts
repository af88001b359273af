// docs/design.md#node-paths on the Proxmox node, against real loop disks and mounts: node calls act only
// inside the kubelet directory and only on mounts of disks this driver attached; data is never
// deleted. Runs in its own mount namespace: code with the defect would unmount host mounts.
import { reexecInPrivateMountNs, inPrivateMountNs } from '../../helpers/private-mount-ns.js';
reexecInPrivateMountNs(import.meta.url);

import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import { NODE_METHODS, implemented } from '../../helpers/implemented.js';
import { createProxmoxNode } from '../../../src/proxmox/node/node.js';
import { isCsiError } from '../../../src/errors.js';
import type { CallContext, NodeBackend, VolumeCapability } from '../../../src/csi/types.js';
import { wwnHexForSlot as wwnForSlot } from '../../../src/proxmox/contract.js';
import { canUseLoopDevices, LoopRig } from './loop-rig.js';
import { nodePublishReq } from '../../helpers/csi-requests.js';
import { rejection } from '../../helpers/rejection.js';

const skip = canUseLoopDevices() || (inPrivateMountNs() ? false : 'needs a private mount namespace (unshare -m)');
const MiB = 1024 * 1024;
const ctx: CallContext = { log: pino({ level: 'silent' }), signal: new AbortController().signal };
const mountCap: VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
  accessType: 'mount',
};
const blockCap: VolumeCapability = { block: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' }, accessType: 'block' };
const code = (e: unknown) => (isCsiError(e) ? e.kind : `not a CsiError: ${String(e)}`);
const publishCtx = (slot: number) => ({ DevicePath: `/dev/disk/by-id/wwn-0x${wwnForSlot(slot)}`, lun: String(slot) });
const run = (cmd: string, args: string[]) =>
  execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
const mountTable = () => fs.readFileSync('/proc/self/mountinfo', 'utf8');
const isMountPoint = (p: string) =>
  mountTable()
    .split('\n')
    .some((l) => l.split(' ')[4] === p);

function setup(t: { teardown(fn: () => void): void }) {
  const rig = new LoopRig(t);
  const kubelet = rig.path('kubelet');
  fs.mkdirSync(path.join(kubelet, 'pods'), { recursive: true });
  const outside = rig.path('outside');
  fs.mkdirSync(outside);
  const backend: NodeBackend = createProxmoxNode({
    nodeId: 'talos-w1',
    region: 'homelab',
    zone: 'hyper1',
    deviceDir: rig.devDir,
    kubeletDir: kubelet,
    log: pino({ level: 'silent' }),
    nodeLabels: null,
    deviceWaitMs: 300,
  });
  const node = implemented(backend, NODE_METHODS);
  /** An unrelated filesystem with a file in it, mounted at `at`. */
  const tmpfsAt = (at: string) => {
    fs.mkdirSync(at, { recursive: true });
    run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'unrelated', at]);
    fs.writeFileSync(path.join(at, 'precious.txt'), 'not yours');
  };
  return { rig, kubelet, outside, node, tmpfsAt };
}

t.test('target "/" is refused with INVALID_ARGUMENT and nothing is unmounted', { skip }, async (t) => {
  const { node, kubelet } = setup(t);
  const before = mountTable();
  for (const targetPath of ['/', '//', '/../..']) {
    const err = await rejection(
      node.nodeUnpublishVolume({ volumeId: 'homelab/hyper1/local-lvm/vm-9999-pvc-x', targetPath }, ctx),
    );
    t.equal(code(err), 'InvalidArgument', `unpublish ${targetPath}`);
    t.match(err.message, kubelet, 'the message names the kubelet directory');
  }
  const unstage = await rejection(node.nodeUnstageVolume({ volumeId: 'v', stagingTargetPath: '/' }, ctx));
  t.equal(code(unstage), 'InvalidArgument', 'unstage /');
  t.equal(mountTable(), before, 'mount table unchanged');
});

t.test('a made-up volume id over an unrelated mount: left mounted, FAILED_PRECONDITION', { skip }, async (t) => {
  const { node, kubelet, tmpfsAt } = setup(t);
  const target = path.join(kubelet, 'pods', 'p1', 'volumes', 'kubernetes.io~csi', 'pv', 'mount');
  tmpfsAt(target);
  const err = await rejection(node.nodeUnpublishVolume({ volumeId: 'made/up/volume/id', targetPath: target }, ctx));
  t.equal(code(err), 'FailedPrecondition');
  t.match(err.message, target);
  t.ok(isMountPoint(target), 'still mounted');
  t.equal(fs.readFileSync(path.join(target, 'precious.txt'), 'utf8'), 'not yours');

  const staging = path.join(
    kubelet,
    'plugins',
    'kubernetes.io',
    'csi',
    'csi.proxmox.sinextra.dev',
    'abc',
    'globalmount',
  );
  tmpfsAt(staging);
  const err2 = await rejection(
    node.nodeUnstageVolume({ volumeId: 'made/up/volume/id', stagingTargetPath: staging }, ctx),
  );
  t.equal(code(err2), 'FailedPrecondition', 'unstage over an unrelated mount');
  t.ok(isMountPoint(staging), 'staging mount left alone');
});

t.test('a plain file holding data at the target is never deleted; an empty dir is', { skip }, async (t) => {
  const { node, kubelet } = setup(t);
  const file = path.join(kubelet, 'pods', 'p2', 'volumeDevices', 'dev');
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, 'user data');
  const err = await rejection(
    node.nodeUnpublishVolume({ volumeId: 'homelab/hyper1/local-lvm/vm-9999-pvc-y', targetPath: file }, ctx),
  );
  t.equal(code(err), 'FailedPrecondition');
  t.equal(fs.readFileSync(file, 'utf8'), 'user data', 'file kept');
  const dir = path.join(kubelet, 'pods', 'p2', 'empty');
  fs.mkdirSync(dir);
  await node.nodeUnpublishVolume({ volumeId: 'homelab/hyper1/local-lvm/vm-9999-pvc-y', targetPath: dir }, ctx);
  t.notOk(fs.existsSync(dir), 'empty directory removed');
});

t.test(
  'relative paths and paths outside the kubelet dir are refused by every node call, nothing touched',
  { skip },
  async (t) => {
    const { rig, node, kubelet, outside, tmpfsAt } = setup(t);
    rig.addDisk(64 * MiB, wwnForSlot(2));
    const victim = path.join(outside, 'victim');
    tmpfsAt(victim);
    const volumeId = 'homelab/hyper1/local-lvm/vm-9999-pvc-z';
    const good = path.join(kubelet, 'pods', 'p3', 'mount');
    const goodStaging = path.join(kubelet, 'staging', 'z');
    const paths = ['pods/p3/mount', './x', victim, `${kubelet}/../outside/victim`, `${kubelet}-evil/x`, kubelet];
    for (const p of paths) {
      const calls: Record<string, () => Promise<unknown>> = {
        NodeUnpublishVolume: () => node.nodeUnpublishVolume({ volumeId, targetPath: p }, ctx),
        NodeUnstageVolume: () => node.nodeUnstageVolume({ volumeId, stagingTargetPath: p }, ctx),
        NodeStageVolume: () =>
          node.nodeStageVolume(
            {
              volumeId,
              publishContext: publishCtx(2),
              stagingTargetPath: p,
              volumeCapability: mountCap,
              secrets: {},
              volumeContext: {},
            },
            ctx,
          ),
        'NodePublishVolume target': () =>
          node.nodePublishVolume(
            nodePublishReq({
              volumeId,
              publishContext: publishCtx(2),
              stagingTargetPath: goodStaging,
              targetPath: p,
              volumeCapability: blockCap,
            }),
            ctx,
          ),
        'NodePublishVolume staging': () =>
          node.nodePublishVolume(
            nodePublishReq({
              volumeId,
              publishContext: publishCtx(2),
              stagingTargetPath: p,
              targetPath: good,
              volumeCapability: mountCap,
            }),
            ctx,
          ),
        NodeExpandVolume: () =>
          node.nodeExpandVolume(
            {
              volumeId,
              volumePath: p,
              capacityRange: null,
              stagingTargetPath: '',
              volumeCapability: null,
              secrets: {},
            },
            ctx,
          ),
        NodeGetVolumeStats: () => node.nodeGetVolumeStats({ volumeId, volumePath: p, stagingTargetPath: '' }, ctx),
      };
      for (const [rpc, call] of Object.entries(calls)) {
        const err = await call().then(
          () => 'OK',
          (e: unknown) => e,
        );
        // csi-sanity wants NOT_FOUND for stats/expand at "some/path": no volume can be there.
        const want =
          !p.startsWith('/') && (rpc === 'NodeExpandVolume' || rpc === 'NodeGetVolumeStats')
            ? 'NotFound'
            : 'InvalidArgument';
        t.equal(code(err), want, `${rpc} ${p}`);
      }
    }
    t.ok(isMountPoint(victim), 'the mount outside is still there');
    t.equal(fs.readFileSync(path.join(victim, 'precious.txt'), 'utf8'), 'not yours');
    t.notOk(fs.existsSync(good), 'nothing created inside either');
  },
);

t.test('a symlink inside the kubelet dir cannot lead a call outside it', { skip }, async (t) => {
  const { rig, node, kubelet, outside, tmpfsAt } = setup(t);
  rig.addDisk(64 * MiB, wwnForSlot(3));
  const victim = path.join(outside, 'victim');
  tmpfsAt(victim);
  const toRoot = path.join(kubelet, 'pods', 'to-root');
  const toOutside = path.join(kubelet, 'pods', 'to-outside');
  fs.symlinkSync('/', toRoot);
  fs.symlinkSync(outside, toOutside);
  const volumeId = 'homelab/hyper1/local-lvm/vm-9999-pvc-s';
  const before = mountTable();
  for (const p of [
    toRoot,
    `${toRoot}/`,
    path.join(toOutside, 'victim'),
    path.join(toRoot, 'proc'),
    path.join(toOutside, 'new-dir'),
  ]) {
    const err = await rejection(node.nodeUnpublishVolume({ volumeId, targetPath: p }, ctx));
    t.equal(code(err), 'InvalidArgument', `unpublish ${p}`);
    const pub = await rejection(
      node.nodePublishVolume(
        nodePublishReq({
          volumeId,
          publishContext: publishCtx(3),
          stagingTargetPath: path.join(kubelet, 'staging', 's'),
          targetPath: p,
          volumeCapability: blockCap,
        }),
        ctx,
      ),
    );
    t.equal(code(pub), 'InvalidArgument', `publish ${p}`);
    const stage = await rejection(
      node.nodeStageVolume(
        {
          volumeId,
          publishContext: publishCtx(3),
          stagingTargetPath: p,
          volumeCapability: mountCap,
          secrets: {},
          volumeContext: {},
        },
        ctx,
      ),
    );
    t.equal(code(stage), 'InvalidArgument', `stage ${p}`);
  }
  t.equal(mountTable(), before, 'no mount added or removed');
  t.ok(fs.lstatSync(toRoot).isSymbolicLink(), 'the planted symlink is not deleted either');
  t.notOk(fs.existsSync(path.join(outside, 'new-dir')), 'nothing created outside');
});

t.test('stage never formats or mounts a disk that is not one this driver attached', { skip }, async (t) => {
  const { rig, node, kubelet } = setup(t);
  // A disk whose WWN is not the PVC-ID scheme: the boot disk, or any disk someone else attached.
  const foreign = rig.addDisk(64 * MiB, '5000c500a1b2c3d4');
  const staging = path.join(kubelet, 'staging', 'foreign');
  const err = await rejection(
    node.nodeStageVolume(
      {
        volumeId: 'v',
        publishContext: { DevicePath: '/dev/disk/by-id/wwn-0x5000c500a1b2c3d4' },
        stagingTargetPath: staging,
        volumeCapability: mountCap,
        secrets: {},
        volumeContext: {},
      },
      ctx,
    ),
  );
  t.equal(code(err), 'InvalidArgument');
  const probe = spawnSync('blkid', ['-p', '-o', 'export', foreign.device], { encoding: 'utf8' });
  t.equal(probe.status, 2, `blkid finds nothing on the foreign disk: ${probe.stdout}`);
});

t.test('stage refuses a disk with a foreign signature: nothing formatted, nothing mounted', { skip }, async (t) => {
  const { rig, node, kubelet } = setup(t);
  const swap = rig.addDisk(64 * MiB, wwnForSlot(6));
  run('mkswap', [swap.device]);
  const ext4 = rig.addDisk(64 * MiB, wwnForSlot(7));
  run('mkfs.ext4', ['-q', ext4.device]);
  const stage = (slot: number, fsType: string) =>
    node.nodeStageVolume(
      {
        volumeId: `v${slot}`,
        publishContext: publishCtx(slot),
        stagingTargetPath: path.join(kubelet, 'staging', `s${slot}`),
        volumeCapability: { ...mountCap, mount: { fsType, mountFlags: [], volumeMountGroup: '' } },
        secrets: {},
        volumeContext: {},
      },
      ctx,
    );
  const onSwap = await rejection(stage(6, 'ext4'));
  t.equal(code(onSwap), 'FailedPrecondition');
  t.match(onSwap.message, /already holds a swap filesystem/);
  const asXfs = await rejection(stage(7, 'xfs'));
  t.equal(code(asXfs), 'FailedPrecondition');
  t.match(asXfs.message, /already holds a ext4 filesystem but xfs was requested/);
  t.same(rig.mountsUnderRoot(), [], 'nothing mounted');
  t.match(run('blkid', ['-p', '-o', 'export', swap.device]), /TYPE=swap/, 'the swap signature is intact');
  t.match(run('blkid', ['-p', '-o', 'export', ext4.device]), /TYPE=ext4/, 'the ext4 filesystem is intact');
});

t.test('stage refuses to format a disk that holds data without a filesystem signature', { skip }, async (t) => {
  const { rig, node, kubelet } = setup(t);
  const disk = rig.addDisk(64 * MiB, wwnForSlot(4));
  // A raw (block-mode) volume used by a database: data, no signature blkid knows.
  const fd = fs.openSync(disk.device, 'r+');
  fs.writeSync(fd, Buffer.alloc(4096, 0x5a), 0, 4096, 8192);
  fs.closeSync(fd);
  const staging = path.join(kubelet, 'staging', 'raw');
  const err = await rejection(
    node.nodeStageVolume(
      {
        volumeId: 'v4',
        publishContext: publishCtx(4),
        stagingTargetPath: staging,
        volumeCapability: mountCap,
        secrets: {},
        volumeContext: {},
      },
      ctx,
    ),
  );
  t.equal(code(err), 'FailedPrecondition');
  t.match(err.message, /not empty|data/);
  const back = Buffer.alloc(4096);
  const rfd = fs.openSync(disk.device, 'r');
  fs.readSync(rfd, back, 0, 4096, 8192);
  fs.closeSync(rfd);
  t.ok(
    back.every((b) => b === 0x5a),
    'data intact',
  );
});

t.test(
  'the real lifecycle still works inside the kubelet dir, through a symlinked kubelet dir too',
  { skip },
  async (t) => {
    const { rig, node, kubelet } = setup(t);
    rig.addDisk(64 * MiB, wwnForSlot(5));
    const link = rig.path('kubelet-link');
    fs.symlinkSync(kubelet, link);
    const viaLink = implemented(
      createProxmoxNode({
        nodeId: 'talos-w1',
        region: 'homelab',
        zone: 'hyper1',
        deviceDir: rig.devDir,
        kubeletDir: link,
        log: pino({ level: 'silent' }),
        nodeLabels: null,
        deviceWaitMs: 300,
      }),
      NODE_METHODS,
    );
    const volumeId = 'homelab/hyper1/local-lvm/vm-9999-pvc-ok';
    const staging = path.join(link, 'staging', 'ok');
    const target = path.join(kubelet, 'pods', 'p9', 'mount');
    const blockTarget = path.join(kubelet, 'pods', 'p9', 'dev');
    await viaLink.nodeStageVolume(
      {
        volumeId,
        publishContext: publishCtx(5),
        stagingTargetPath: staging,
        volumeCapability: mountCap,
        secrets: {},
        volumeContext: {},
      },
      ctx,
    );
    await node.nodePublishVolume(
      nodePublishReq({
        volumeId,
        publishContext: publishCtx(5),
        stagingTargetPath: path.join(kubelet, 'staging', 'ok'),
        targetPath: target,
        volumeCapability: mountCap,
      }),
      ctx,
    );
    fs.writeFileSync(path.join(target, 'data'), 'x');
    await node.nodePublishVolume(
      nodePublishReq({
        volumeId,
        publishContext: publishCtx(5),
        stagingTargetPath: path.join(kubelet, 'staging', 'blk'),
        targetPath: blockTarget,
        volumeCapability: blockCap,
      }),
      ctx,
    );
    // Unpublish proves the mount is a disk of this driver, whatever the volume id says.
    await node.nodeUnpublishVolume({ volumeId, targetPath: target }, ctx);
    await node.nodeUnpublishVolume({ volumeId, targetPath: blockTarget }, ctx);
    t.notOk(fs.existsSync(target), 'target removed');
    t.notOk(fs.existsSync(blockTarget), 'the empty bind file the driver made is removed');
    await viaLink.nodeUnstageVolume({ volumeId, stagingTargetPath: staging }, ctx);
    t.notOk(isMountPoint(path.join(kubelet, 'staging', 'ok')), 'unstaged');
  },
);
