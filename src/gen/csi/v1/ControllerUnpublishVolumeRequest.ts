// Original file: proto/csi.proto


export interface ControllerUnpublishVolumeRequest {
  'volumeId'?: (string);
  'nodeId'?: (string);
  'secrets'?: ({[key: string]: string});
}

export interface ControllerUnpublishVolumeRequest__Output {
  'volumeId': (string);
  'nodeId': (string);
  'secrets': ({[key: string]: string});
}
