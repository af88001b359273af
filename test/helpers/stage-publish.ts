// What kubelet does to give a pod a volume, over gRPC: NodeStageVolume to the staging path, then
// NodePublishVolume from there to the pod's target.
import type { CsiClient, VolumeCapability } from './csi-client.js';

export interface StagedVolume {
  volumeId: string;
  publishContext: Record<string, string>;
  stagingTargetPath: string;
  targetPath: string;
  volumeCapability: VolumeCapability;
}

export async function stageAndPublish(c: CsiClient, v: StagedVolume): Promise<void> {
  const { volumeId, publishContext, stagingTargetPath, volumeCapability } = v;
  await c.node.NodeStageVolume({ volumeId, publishContext, stagingTargetPath, volumeCapability });
  await c.node.NodePublishVolume({ ...v });
}
