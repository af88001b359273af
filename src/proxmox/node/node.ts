// The node half of csi.proxmox.sinextra.dev: disks hot-plugged into this VM by the controller,
// found by WWN, formatted once, staged, bound into pods.
import { bindHandlers } from '../../csi/bind.js';
import type { NodeBackend, NodeCapability, NodeGetInfoResponse } from '../../csi/types.js';
import { asCsiError } from '../../node/common.js';
import { type ProxmoxNodeOptions, proxmoxNodeDeps } from './deps.js';
import { nodePublishVolume, nodeUnpublishVolume } from './publish.js';
import { nodeStageVolume, nodeUnstageVolume } from './stage.js';
import { nodeExpandVolume, nodeGetVolumeStats } from './volume.js';
import { confineToKubeletDir, DEFAULT_KUBELET_DIR } from '../../node/paths.js';
import { inClusterNodeLabels, resolveTopology, type NodeLabelSource } from './topology.js';
import { MAX_SLOT, MIN_SLOT, TOPOLOGY_REGION_KEY, TOPOLOGY_ZONE_KEY } from '../contract.js';

export type { ProxmoxNodeOptions } from './deps.js';

export const PROXMOX_NODE_CAPABILITIES: readonly NodeCapability[] = [
  'STAGE_UNSTAGE_VOLUME',
  'GET_VOLUME_STATS',
  'EXPAND_VOLUME',
  'VOLUME_CONDITION',
  // SINGLE_NODE_SINGLE_WRITER is enforced from the mount table (publications.ts).
  'SINGLE_NODE_MULTI_WRITER',
];

export function createProxmoxNode(opts: ProxmoxNodeOptions): NodeBackend {
  const d = proxmoxNodeDeps(opts);
  let labels: Promise<NodeLabelSource | undefined> | undefined;
  const labelSource = () => {
    if (d.nodeLabels !== undefined) return Promise.resolve(d.nodeLabels ?? undefined);
    labels ??= inClusterNodeLabels();
    return labels;
  };

  const backend: NodeBackend = {
    capabilities: PROXMOX_NODE_CAPABILITIES,

    async nodeGetInfo(ctx): Promise<NodeGetInfoResponse> {
      try {
        const topo = await resolveTopology({
          nodeId: d.nodeId,
          region: d.region,
          zone: d.zone,
          labels: await labelSource(),
          signal: ctx.signal,
        });
        let foreign = 0;
        try {
          foreign = await d.blockDevices.foreignSlots();
        } catch (e) {
          ctx.log.warn({ err: e }, 'cannot count SCSI disks not managed by this driver; assuming none');
        }
        // Zero would mean "no limit" to the CO; with every slot taken the honest answer is unusable anyway.
        const free = Math.max(1, MAX_SLOT - MIN_SLOT + 1 - foreign);
        // The operator's limit only lowers it: a slot another disk holds is never offered.
        const maxVolumesPerNode = d.maxVolumes ? Math.min(d.maxVolumes, free) : free;
        return {
          nodeId: d.nodeId,
          maxVolumesPerNode,
          accessibleTopology: { segments: { [TOPOLOGY_REGION_KEY]: topo.region, [TOPOLOGY_ZONE_KEY]: topo.zone } },
        };
      } catch (e) {
        throw asCsiError(e, `NodeGetInfo for ${d.nodeId}`);
      }
    },

    ...bindHandlers(d, {
      nodeStageVolume,
      nodeUnstageVolume,
      nodePublishVolume,
      nodeUnpublishVolume,
      nodeExpandVolume,
      nodeGetVolumeStats,
    }),
  };
  return confineToKubeletDir(backend, opts.kubeletDir ?? DEFAULT_KUBELET_DIR);
}
