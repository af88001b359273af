// Original file: proto/csi.proto

import type { Long } from '@grpc/proto-loader';

export interface BlockMetadata {
  'byteOffset'?: (number | string | Long);
  'sizeBytes'?: (number | string | Long);
}

export interface BlockMetadata__Output {
  'byteOffset': (string);
  'sizeBytes': (string);
}
