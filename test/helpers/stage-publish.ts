// What kubelet does to give a pod a volume, over gRPC: NodeStageVolume to the staging path, then
// NodePublishVolume from there to the pod's target; and the way back.
import type { CsiClient, VolumeCapability } from './csi-client.js';

export interface StagedVolume {
  volumeId: string;
  publishContext: Record<string, string>;
  stagingTargetPath: string;
  targetPath: string;
  volumeCapability: VolumeCapability;
  volumeContext?: Record<string, string>;
  /** The node-stage secrets (a LUKS passphrase): sent with NodeStageVolume only. */
  stageSecrets?: Record<string, string>;
}

export async function stageAndPublish(c: CsiClient, v: StagedVolume): Promise<void> {
  const { stageSecrets, targetPath, ...staged } = v;
  await c.node.NodeStageVolume({ ...staged, ...(stageSecrets && { secrets: stageSecrets }) });
  await c.node.NodePublishVolume({ ...staged, targetPath });
}

/** NodeUnpublishVolume from the target, then NodeUnstageVolume. */
export async function unpublishAndUnstage(
  c: CsiClient,
  v: Pick<StagedVolume, 'volumeId' | 'targetPath' | 'stagingTargetPath'>,
): Promise<void> {
  await c.node.NodeUnpublishVolume({ volumeId: v.volumeId, targetPath: v.targetPath });
  await c.node.NodeUnstageVolume({ volumeId: v.volumeId, stagingTargetPath: v.stagingTargetPath });
}
