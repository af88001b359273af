// Original file: proto/csi.proto


export interface ControllerGetVolumeRequest {
  'volumeId'?: (string);
}

export interface ControllerGetVolumeRequest__Output {
  'volumeId': (string);
}
