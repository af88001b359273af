// Both node backends behind the real gRPC server: what goes over the wire (64-bit numbers,
// enum names, status codes) and a full stage/publish/stats/unpublish/unstage on a loop disk.
import t from 'tap';
import fs from 'node:fs';
import { status } from '@grpc/grpc-js';
import { pino } from 'pino';
import { createProxmoxNode } from '../../../src/proxmox/node/node.js';
import { createNfsNode } from '../../../src/nfs/node/node.js';
import { wwnHexForSlot as wwnForSlot } from '../../../src/proxmox/contract.js';
import type { VolumeCapability } from '../../helpers/csi-client.js';
import { serveDriver } from '../../helpers/driver-server.js';
import type { Teardown } from '../../helpers/teardown.js';
import type { NodeBackend } from '../../../src/csi/types.js';
import { canUseLoopDevices, LoopRig } from './loop-rig.js';
import { rejection } from '../../helpers/rejection.js';
import { stageAndPublish } from '../../helpers/stage-publish.js';

const log = pino({ level: 'silent' });
const MiB = 1024 * 1024;

/** A driver's node half alone behind the gRPC server, as the node plugin serves it. */
const serveNode = (
  t: Teardown,
  name: string,
  node: NodeBackend,
  features: { topology: boolean; onlineExpansion: boolean },
) =>
  serveDriver(
    t,
    {
      name,
      accessibilityConstraints: features.topology,
      onlineExpansion: features.onlineExpansion,
      probe: async () => true,
      node,
    },
    { mode: 'node', log, version: 'test' },
  );

t.test('Proxmox node over gRPC on a loop disk', { skip: canUseLoopDevices() }, async (t) => {
  const rig = new LoopRig(t);
  rig.addDisk(256 * MiB, wwnForSlot(2));
  const node = createProxmoxNode({
    nodeId: 'talos-w1',
    region: 'homelab',
    zone: 'hyper1',
    deviceDir: rig.devDir,
    kubeletDir: rig.root,
    log,
    nodeLabels: null,
    deviceWaitMs: 500,
  });
  const { c } = await serveNode(t, 'csi.proxmox.sinextra.dev', node, { topology: true, onlineExpansion: true });

  const caps = await c.node.NodeGetCapabilities();
  t.same(
    caps.capabilities.map((x) => x.rpc?.type),
    ['STAGE_UNSTAGE_VOLUME', 'GET_VOLUME_STATS', 'EXPAND_VOLUME', 'VOLUME_CONDITION', 'SINGLE_NODE_MULTI_WRITER'],
  );
  const info = await c.node.NodeGetInfo();
  t.equal(info.nodeId, 'talos-w1');
  t.equal(info.maxVolumesPerNode, '30');
  t.same(info.accessibleTopology?.segments, {
    'topology.kubernetes.io/region': 'homelab',
    'topology.kubernetes.io/zone': 'hyper1',
  });

  const volumeId = 'homelab/hyper1/local-lvm/vm-9999-pvc-grpc';
  const publishContext = { DevicePath: `/dev/disk/by-id/wwn-0x${wwnForSlot(2)}`, lun: '2' };
  const volumeCapability: VolumeCapability = { mount: { fsType: 'ext4' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } };
  const staging = rig.path('stage');
  const target = rig.path('target');
  await stageAndPublish(c, {
    volumeId,
    publishContext,
    stagingTargetPath: staging,
    targetPath: target,
    volumeCapability,
  });
  const stats = await c.node.NodeGetVolumeStats({ volumeId, volumePath: target });
  t.same(
    stats.usage.map((u) => u.unit),
    ['BYTES', 'INODES'],
  );
  t.ok(Number(stats.usage[0]?.total) > 200 * MiB);
  t.same(stats.volumeCondition, { abnormal: false, message: '' });
  const missing = await rejection(c.node.NodeGetVolumeStats({ volumeId, volumePath: rig.path('nope') }));
  t.equal(missing.code, status.NOT_FOUND);
  const noCtx = await rejection(
    c.node.NodeStageVolume({ volumeId, stagingTargetPath: rig.path('s2'), volumeCapability }),
  );
  t.equal(noCtx.code, status.INVALID_ARGUMENT);
  t.match(noCtx.details, /neither DevicePath nor lun/);
  await c.node.NodeUnpublishVolume({ volumeId, targetPath: target });
  await c.node.NodeUnstageVolume({ volumeId, stagingTargetPath: staging });
  t.notOk(fs.existsSync(target));
  t.same(rig.mountsUnderRoot(), []);
});

t.test('NFS node over gRPC: info, capabilities, block refused', async (t) => {
  const node = createNfsNode({ nodeId: 'talos-w1', log, mountTimeoutMs: 1000, kubeletDir: '/tmp' });
  const { c } = await serveNode(t, 'nfs.csi.k8s.io', node, { topology: false, onlineExpansion: false });
  const info = await c.node.NodeGetInfo();
  t.equal(info.nodeId, 'talos-w1');
  t.equal(info.accessibleTopology, null);
  const caps = await c.node.NodeGetCapabilities();
  t.same(
    caps.capabilities.map((x) => x.rpc?.type),
    ['GET_VOLUME_STATS', 'VOLUME_CONDITION', 'SINGLE_NODE_MULTI_WRITER'],
  );
  const err = await rejection(
    c.node.NodePublishVolume({
      volumeId: 'v',
      targetPath: '/tmp/never-created-by-this-test',
      volumeCapability: { block: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' } },
      volumeContext: { server: '127.0.0.1', share: '/x' },
    }),
  );
  t.equal(err.code, status.INVALID_ARGUMENT);
  t.notOk(fs.existsSync('/tmp/never-created-by-this-test'));
});
