// Original file: proto/csi.proto

export const BlockMetadataType = {
  UNKNOWN: 'UNKNOWN',
  FIXED_LENGTH: 'FIXED_LENGTH',
  VARIABLE_LENGTH: 'VARIABLE_LENGTH',
} as const;

export type BlockMetadataType =
  | 'UNKNOWN'
  | 0
  | 'FIXED_LENGTH'
  | 1
  | 'VARIABLE_LENGTH'
  | 2

export type BlockMetadataType__Output = typeof BlockMetadataType[keyof typeof BlockMetadataType]
