// Original file: proto/csi.proto

import type { BlockMetadataType as _csi_v1_BlockMetadataType, BlockMetadataType__Output as _csi_v1_BlockMetadataType__Output } from '../../csi/v1/BlockMetadataType.js';
import type { BlockMetadata as _csi_v1_BlockMetadata, BlockMetadata__Output as _csi_v1_BlockMetadata__Output } from '../../csi/v1/BlockMetadata.js';
import type { Long } from '@grpc/proto-loader';

export interface GetMetadataDeltaResponse {
  'blockMetadataType'?: (_csi_v1_BlockMetadataType);
  'volumeCapacityBytes'?: (number | string | Long);
  'blockMetadata'?: (_csi_v1_BlockMetadata)[];
}

export interface GetMetadataDeltaResponse__Output {
  'blockMetadataType': (_csi_v1_BlockMetadataType__Output);
  'volumeCapacityBytes': (string);
  'blockMetadata': (_csi_v1_BlockMetadata__Output)[];
}
