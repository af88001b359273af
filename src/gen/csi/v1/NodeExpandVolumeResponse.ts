// Original file: proto/csi.proto

import type { Long } from '@grpc/proto-loader';

export interface NodeExpandVolumeResponse {
  'capacityBytes'?: (number | string | Long);
}

export interface NodeExpandVolumeResponse__Output {
  'capacityBytes': (string);
}
