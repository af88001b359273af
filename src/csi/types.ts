// Short names for the generated CSI message types, and the shapes a driver backend implements.
// Requests are the decoded (__Output) form, responses the encodable form.
export type { CreateVolumeRequest__Output as CreateVolumeRequest } from '../gen/csi/v1/CreateVolumeRequest.js';
export type { CreateVolumeResponse } from '../gen/csi/v1/CreateVolumeResponse.js';
export type { DeleteVolumeRequest__Output as DeleteVolumeRequest } from '../gen/csi/v1/DeleteVolumeRequest.js';
export type { DeleteVolumeResponse } from '../gen/csi/v1/DeleteVolumeResponse.js';
export type { ControllerPublishVolumeRequest__Output as ControllerPublishVolumeRequest } from '../gen/csi/v1/ControllerPublishVolumeRequest.js';
export type { ControllerPublishVolumeResponse } from '../gen/csi/v1/ControllerPublishVolumeResponse.js';
export type { ControllerUnpublishVolumeRequest__Output as ControllerUnpublishVolumeRequest } from '../gen/csi/v1/ControllerUnpublishVolumeRequest.js';
export type { ControllerUnpublishVolumeResponse } from '../gen/csi/v1/ControllerUnpublishVolumeResponse.js';
export type { ValidateVolumeCapabilitiesRequest__Output as ValidateVolumeCapabilitiesRequest } from '../gen/csi/v1/ValidateVolumeCapabilitiesRequest.js';
export type { ValidateVolumeCapabilitiesResponse } from '../gen/csi/v1/ValidateVolumeCapabilitiesResponse.js';
export type { ListVolumesRequest__Output as ListVolumesRequest } from '../gen/csi/v1/ListVolumesRequest.js';
export type { ListVolumesResponse } from '../gen/csi/v1/ListVolumesResponse.js';
export type { GetCapacityRequest__Output as GetCapacityRequest } from '../gen/csi/v1/GetCapacityRequest.js';
export type { GetCapacityResponse } from '../gen/csi/v1/GetCapacityResponse.js';
export type { ControllerExpandVolumeRequest__Output as ControllerExpandVolumeRequest } from '../gen/csi/v1/ControllerExpandVolumeRequest.js';
export type { ControllerExpandVolumeResponse } from '../gen/csi/v1/ControllerExpandVolumeResponse.js';
export type { ControllerGetVolumeRequest__Output as ControllerGetVolumeRequest } from '../gen/csi/v1/ControllerGetVolumeRequest.js';
export type { ControllerGetVolumeResponse } from '../gen/csi/v1/ControllerGetVolumeResponse.js';
export type { ControllerModifyVolumeRequest__Output as ControllerModifyVolumeRequest } from '../gen/csi/v1/ControllerModifyVolumeRequest.js';
export type { ControllerModifyVolumeResponse } from '../gen/csi/v1/ControllerModifyVolumeResponse.js';
export type { CreateSnapshotRequest__Output as CreateSnapshotRequest } from '../gen/csi/v1/CreateSnapshotRequest.js';
export type { CreateSnapshotResponse } from '../gen/csi/v1/CreateSnapshotResponse.js';
export type { DeleteSnapshotRequest__Output as DeleteSnapshotRequest } from '../gen/csi/v1/DeleteSnapshotRequest.js';
export type { DeleteSnapshotResponse } from '../gen/csi/v1/DeleteSnapshotResponse.js';
export type { ListSnapshotsRequest__Output as ListSnapshotsRequest } from '../gen/csi/v1/ListSnapshotsRequest.js';
export type { ListSnapshotsResponse } from '../gen/csi/v1/ListSnapshotsResponse.js';
export type { Snapshot } from '../gen/csi/v1/Snapshot.js';
export type { Snapshot as CsiSnapshot } from '../gen/csi/v1/Snapshot.js';
export type { NodeStageVolumeRequest__Output as NodeStageVolumeRequest } from '../gen/csi/v1/NodeStageVolumeRequest.js';
export type { NodeStageVolumeResponse } from '../gen/csi/v1/NodeStageVolumeResponse.js';
export type { NodeUnstageVolumeRequest__Output as NodeUnstageVolumeRequest } from '../gen/csi/v1/NodeUnstageVolumeRequest.js';
export type { NodeUnstageVolumeResponse } from '../gen/csi/v1/NodeUnstageVolumeResponse.js';
export type { NodePublishVolumeRequest__Output as NodePublishVolumeRequest } from '../gen/csi/v1/NodePublishVolumeRequest.js';
export type { NodePublishVolumeResponse } from '../gen/csi/v1/NodePublishVolumeResponse.js';
export type { NodeUnpublishVolumeRequest__Output as NodeUnpublishVolumeRequest } from '../gen/csi/v1/NodeUnpublishVolumeRequest.js';
export type { NodeUnpublishVolumeResponse } from '../gen/csi/v1/NodeUnpublishVolumeResponse.js';
export type { NodeGetVolumeStatsRequest__Output as NodeGetVolumeStatsRequest } from '../gen/csi/v1/NodeGetVolumeStatsRequest.js';
export type { NodeGetVolumeStatsResponse } from '../gen/csi/v1/NodeGetVolumeStatsResponse.js';
export type { NodeExpandVolumeRequest__Output as NodeExpandVolumeRequest } from '../gen/csi/v1/NodeExpandVolumeRequest.js';
export type { NodeExpandVolumeResponse } from '../gen/csi/v1/NodeExpandVolumeResponse.js';
export type { NodeGetInfoResponse } from '../gen/csi/v1/NodeGetInfoResponse.js';
export type { VolumeCapability__Output as VolumeCapability } from '../gen/csi/v1/VolumeCapability.js';
export type { Topology__Output as Topology } from '../gen/csi/v1/Topology.js';
export type { _csi_v1_ControllerServiceCapability_RPC_Type as ControllerCapability } from '../gen/csi/v1/ControllerServiceCapability.js';
export type { _csi_v1_NodeServiceCapability_RPC_Type as NodeCapability } from '../gen/csi/v1/NodeServiceCapability.js';

import type * as T from './types.js';

/** Per-call context handed to backends by the server: a logger bound to the request. */
export interface CallContext {
  log: import('pino').Logger;
  /** Aborted when the client cancels or the deadline passes. */
  signal: AbortSignal;
  /** The client's deadline (epoch ms), when it sent one: a wait can answer before it. */
  deadline?: number;
}

type H<Req, Res> = (req: Req, ctx: CallContext) => Promise<Res>;

/**
 * What a driver's controller backend implements. The server validates required fields common to
 * every driver (ids present, capabilities present) before calling; backends validate the rest.
 * An optional method that is absent answers UNIMPLEMENTED and its capability is not advertised.
 */
export interface ControllerBackend {
  capabilities: readonly T.ControllerCapability[];
  createVolume: H<T.CreateVolumeRequest, T.CreateVolumeResponse>;
  deleteVolume: H<T.DeleteVolumeRequest, T.DeleteVolumeResponse>;
  validateVolumeCapabilities: H<T.ValidateVolumeCapabilitiesRequest, T.ValidateVolumeCapabilitiesResponse>;
  controllerPublishVolume?: H<T.ControllerPublishVolumeRequest, T.ControllerPublishVolumeResponse>;
  controllerUnpublishVolume?: H<T.ControllerUnpublishVolumeRequest, T.ControllerUnpublishVolumeResponse>;
  listVolumes?: H<T.ListVolumesRequest, T.ListVolumesResponse>;
  getCapacity?: H<T.GetCapacityRequest, T.GetCapacityResponse>;
  controllerExpandVolume?: H<T.ControllerExpandVolumeRequest, T.ControllerExpandVolumeResponse>;
  controllerGetVolume?: H<T.ControllerGetVolumeRequest, T.ControllerGetVolumeResponse>;
  controllerModifyVolume?: H<T.ControllerModifyVolumeRequest, T.ControllerModifyVolumeResponse>;
  createSnapshot?: H<T.CreateSnapshotRequest, T.CreateSnapshotResponse>;
  deleteSnapshot?: H<T.DeleteSnapshotRequest, T.DeleteSnapshotResponse>;
  listSnapshots?: H<T.ListSnapshotsRequest, T.ListSnapshotsResponse>;
}

export interface NodeBackend {
  capabilities: readonly T.NodeCapability[];
  nodeGetInfo: (ctx: CallContext) => Promise<T.NodeGetInfoResponse>;
  nodeStageVolume?: H<T.NodeStageVolumeRequest, T.NodeStageVolumeResponse>;
  nodeUnstageVolume?: H<T.NodeUnstageVolumeRequest, T.NodeUnstageVolumeResponse>;
  nodePublishVolume: H<T.NodePublishVolumeRequest, T.NodePublishVolumeResponse>;
  nodeUnpublishVolume: H<T.NodeUnpublishVolumeRequest, T.NodeUnpublishVolumeResponse>;
  nodeGetVolumeStats?: H<T.NodeGetVolumeStatsRequest, T.NodeGetVolumeStatsResponse>;
  nodeExpandVolume?: H<T.NodeExpandVolumeRequest, T.NodeExpandVolumeResponse>;
}

/** One CSI driver served on its own endpoint. */
export interface Driver {
  name: string;
  /** Plugin capabilities besides CONTROLLER_SERVICE, which the server adds when a controller is registered. */
  accessibilityConstraints: boolean;
  onlineExpansion: boolean;
  /**
   * Whether this process can serve (Probe). Not backend health: an outage of Proxmox or a NAS
   * must not make the livenessprobe restart the plugin; that goes to `health`. Must not throw.
   */
  probe(signal: AbortSignal): Promise<boolean>;
  /** Health of each backend this driver uses (metrics, logs); never throws. */
  health?(signal: AbortSignal): Promise<import('./health.js').BackendHealth[]>;
  controller?: ControllerBackend;
  node?: NodeBackend;
}
