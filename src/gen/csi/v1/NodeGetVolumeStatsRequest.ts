// Original file: proto/csi.proto


export interface NodeGetVolumeStatsRequest {
  'volumeId'?: (string);
  'volumePath'?: (string);
  'stagingTargetPath'?: (string);
}

export interface NodeGetVolumeStatsRequest__Output {
  'volumeId': (string);
  'volumePath': (string);
  'stagingTargetPath': (string);
}
