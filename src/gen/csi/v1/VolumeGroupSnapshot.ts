// Original file: proto/csi.proto

import type { Snapshot as _csi_v1_Snapshot, Snapshot__Output as _csi_v1_Snapshot__Output } from '../../csi/v1/Snapshot.js';
import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from '../../google/protobuf/Timestamp.js';

export interface VolumeGroupSnapshot {
  'groupSnapshotId'?: (string);
  'snapshots'?: (_csi_v1_Snapshot)[];
  'creationTime'?: (_google_protobuf_Timestamp | null);
  'readyToUse'?: (boolean);
}

export interface VolumeGroupSnapshot__Output {
  'groupSnapshotId': (string);
  'snapshots': (_csi_v1_Snapshot__Output)[];
  'creationTime': (_google_protobuf_Timestamp__Output | null);
  'readyToUse': (boolean);
}
