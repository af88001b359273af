// CSI requests as the controller backends take them (src/csi/types.ts), with the defaults most
// Proxmox tests want: a 1 GiB ext4 single-writer volume on local-lvm, preferred in zone hyper1
// of region homelab (sim/default-cluster.yaml and the unit tests' fake).
import pino from 'pino';
import type * as T from '../../src/csi/types.js';
import { GiB } from '../../src/proxmox/controller/params/params.js';

type TopologyRequirement = NonNullable<T.CreateVolumeRequest['accessibilityRequirements']>;
type CapacityRange = NonNullable<T.CreateVolumeRequest['capacityRange']>;

export const MOUNT: T.VolumeCapability = {
  mount: { fsType: 'ext4', mountFlags: [], volumeMountGroup: '' },
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
  accessType: 'mount',
};
export const BLOCK: T.VolumeCapability = {
  block: {},
  accessMode: { mode: 'SINGLE_NODE_WRITER' },
  accessType: 'block',
};

/** A call context with a silent log, given up after `ms`. */
export const callCtx = (ms = 60_000): T.CallContext => ({
  log: pino({ level: 'silent' }),
  signal: AbortSignal.timeout(ms),
});

export const zone = (z: string, region = 'homelab'): T.Topology => ({
  segments: { 'topology.kubernetes.io/region': region, 'topology.kubernetes.io/zone': z },
});

/** Prefers the zone, requires nothing. */
export const preferZone = (z: string): TopologyRequirement => ({ requisite: [], preferred: [zone(z)] });

export const capacity = (bytes: number): CapacityRange => ({ requiredBytes: String(bytes), limitBytes: '0' });

export function createReq(name: string, o: Partial<T.CreateVolumeRequest> = {}): T.CreateVolumeRequest {
  return {
    name,
    capacityRange: capacity(GiB),
    volumeCapabilities: [MOUNT],
    parameters: { storage: 'local-lvm' },
    secrets: {},
    volumeContentSource: null,
    accessibilityRequirements: preferZone('hyper1'),
    mutableParameters: {},
    ...o,
  };
}

export const publishReq = (
  volumeId: string,
  nodeId: string,
  volumeContext: Record<string, string> = {},
): T.ControllerPublishVolumeRequest => ({
  volumeId,
  nodeId,
  volumeCapability: MOUNT,
  readonly: false,
  secrets: {},
  volumeContext,
});

export const unpublishReq = (volumeId: string, nodeId: string): T.ControllerUnpublishVolumeRequest => ({
  volumeId,
  nodeId,
  secrets: {},
});

export const expandReq = (
  volumeId: string,
  bytes: number,
  volumeCapability: T.VolumeCapability = MOUNT,
): T.ControllerExpandVolumeRequest => ({
  volumeId,
  capacityRange: capacity(bytes),
  secrets: {},
  volumeCapability,
});

/** A NodePublishVolume request: read-write, no secrets, no volume context unless given. */
export const nodePublishReq = (
  o: Pick<T.NodePublishVolumeRequest, 'volumeId' | 'targetPath' | 'volumeCapability'> &
    Partial<T.NodePublishVolumeRequest>,
): T.NodePublishVolumeRequest => ({
  publishContext: {},
  stagingTargetPath: '',
  readonly: false,
  secrets: {},
  volumeContext: {},
  ...o,
});
