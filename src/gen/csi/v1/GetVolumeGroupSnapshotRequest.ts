// Original file: proto/csi.proto


export interface GetVolumeGroupSnapshotRequest {
  'groupSnapshotId'?: (string);
  'snapshotIds'?: (string)[];
  'secrets'?: ({[key: string]: string});
}

export interface GetVolumeGroupSnapshotRequest__Output {
  'groupSnapshotId': (string);
  'snapshotIds': (string)[];
  'secrets': ({[key: string]: string});
}
