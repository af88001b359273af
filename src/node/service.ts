// The CSI Node service of one driver: checks the fields the spec requires, serialises calls per
// volume (declared keys), and dispatches to the driver's node backend. The transport wraps every
// method in the interceptor (src/server/driver-server.ts, src/server/interceptor.ts).
import type { NodeHandlers } from '../gen/csi/v1/Node.js';
import type { NodeBackend } from '../csi/types.js';
import type { ServiceSpecs } from '../csi/service-spec.js';
import { validate } from '../csi/validate.js';

export function nodeService(n: NodeBackend): ServiceSpecs<NodeHandlers> {
  const staged = n.capabilities.includes('STAGE_UNSTAGE_VOLUME');
  return {
    NodeStageVolume: {
      keys: (r) => [`stage:${r.volumeId}`],
      validate: validate.nodeStageVolume,
      impl: staged ? n.nodeStageVolume : undefined,
    },
    NodeUnstageVolume: {
      keys: (r) => [`stage:${r.volumeId}`],
      validate: validate.nodeUnstageVolume,
      impl: staged ? n.nodeUnstageVolume : undefined,
    },
    NodePublishVolume: {
      keys: (r) => [`publish:${r.volumeId}:${r.targetPath}`],
      validate: (r) => validate.nodePublishVolume(r, staged),
      impl: n.nodePublishVolume,
    },
    NodeUnpublishVolume: {
      keys: (r) => [`publish:${r.volumeId}:${r.targetPath}`],
      validate: validate.nodeUnpublishVolume,
      impl: n.nodeUnpublishVolume,
    },
    NodeGetVolumeStats: {
      validate: validate.nodeGetVolumeStats,
      impl: n.capabilities.includes('GET_VOLUME_STATS') ? n.nodeGetVolumeStats : undefined,
    },
    NodeExpandVolume: {
      keys: (r) => [`stage:${r.volumeId}`],
      validate: validate.nodeExpandVolume,
      impl: n.capabilities.includes('EXPAND_VOLUME') ? n.nodeExpandVolume : undefined,
    },
    NodeGetCapabilities: {
      impl: async () => ({ capabilities: n.capabilities.map((type) => ({ rpc: { type } })) }),
    },
    NodeGetInfo: {
      impl: (_r, ctx) => n.nodeGetInfo(ctx),
    },
  };
}
