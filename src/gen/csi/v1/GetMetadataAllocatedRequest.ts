// Original file: proto/csi.proto

import type { Long } from '@grpc/proto-loader';

export interface GetMetadataAllocatedRequest {
  'snapshotId'?: (string);
  'startingOffset'?: (number | string | Long);
  'maxResults'?: (number);
  'secrets'?: ({[key: string]: string});
}

export interface GetMetadataAllocatedRequest__Output {
  'snapshotId': (string);
  'startingOffset': (string);
  'maxResults': (number);
  'secrets': ({[key: string]: string});
}
