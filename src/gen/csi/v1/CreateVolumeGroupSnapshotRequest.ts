// Original file: proto/csi.proto


export interface CreateVolumeGroupSnapshotRequest {
  'name'?: (string);
  'sourceVolumeIds'?: (string)[];
  'secrets'?: ({[key: string]: string});
  'parameters'?: ({[key: string]: string});
}

export interface CreateVolumeGroupSnapshotRequest__Output {
  'name': (string);
  'sourceVolumeIds': (string)[];
  'secrets': ({[key: string]: string});
  'parameters': ({[key: string]: string});
}
