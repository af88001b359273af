// Original file: proto/csi.proto

import type { Long } from '@grpc/proto-loader';

export interface GetMetadataDeltaRequest {
  'baseSnapshotId'?: (string);
  'targetSnapshotId'?: (string);
  'startingOffset'?: (number | string | Long);
  'maxResults'?: (number);
  'secrets'?: ({[key: string]: string});
}

export interface GetMetadataDeltaRequest__Output {
  'baseSnapshotId': (string);
  'targetSnapshotId': (string);
  'startingOffset': (string);
  'maxResults': (number);
  'secrets': ({[key: string]: string});
}
