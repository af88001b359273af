// Original file: proto/csi.proto

import type { CapacityRange as _csi_v1_CapacityRange, CapacityRange__Output as _csi_v1_CapacityRange__Output } from '../../csi/v1/CapacityRange.js';
import type { VolumeCapability as _csi_v1_VolumeCapability, VolumeCapability__Output as _csi_v1_VolumeCapability__Output } from '../../csi/v1/VolumeCapability.js';

export interface ControllerExpandVolumeRequest {
  'volumeId'?: (string);
  'capacityRange'?: (_csi_v1_CapacityRange | null);
  'secrets'?: ({[key: string]: string});
  'volumeCapability'?: (_csi_v1_VolumeCapability | null);
}

export interface ControllerExpandVolumeRequest__Output {
  'volumeId': (string);
  'capacityRange': (_csi_v1_CapacityRange__Output | null);
  'secrets': ({[key: string]: string});
  'volumeCapability': (_csi_v1_VolumeCapability__Output | null);
}
