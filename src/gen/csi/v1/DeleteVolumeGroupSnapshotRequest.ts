// Original file: proto/csi.proto


export interface DeleteVolumeGroupSnapshotRequest {
  'groupSnapshotId'?: (string);
  'snapshotIds'?: (string)[];
  'secrets'?: ({[key: string]: string});
}

export interface DeleteVolumeGroupSnapshotRequest__Output {
  'groupSnapshotId': (string);
  'snapshotIds': (string)[];
  'secrets': ({[key: string]: string});
}
