// The Kubernetes objects the k8s tier reads from the API server and from the rendered chart,
// typed by the API's own models (@kubernetes/client-node, imported as types only: erased at
// run time). The models make every field optional; what the API server always fills in for a
// stored object (metadata.name, metadata.uid, and spec for the kinds that have one) is required
// here, so the tests read it without a guard that could never fire.
import type * as Lib from '@kubernetes/client-node';
import type { Plain } from '../../../src/k8s/api.js';

type SpecOf<T> = 'spec' extends keyof T ? { spec: NonNullable<T[Extract<keyof T, 'spec'>]> } : unknown;

/** An object as the API server returns it. */
export type Stored<T> = Plain<T> & { metadata: Plain<Lib.V1ObjectMeta> & { name: string; uid: string } } & SpecOf<
    Plain<T>
  >;

export type Pod = Stored<Lib.V1Pod>;
export type PersistentVolumeClaim = Stored<Lib.V1PersistentVolumeClaim>;
export type PersistentVolume = Stored<Lib.V1PersistentVolume>;
export type VolumeAttachment = Stored<Lib.V1VolumeAttachment>;
export type CSINode = Stored<Lib.V1CSINode>;
export type CSIDriver = Stored<Lib.V1CSIDriver>;
export type StorageClass = Stored<Lib.V1StorageClass>;
export type CSIStorageCapacity = Stored<Lib.V1CSIStorageCapacity>;
export type Lease = Stored<Lib.V1Lease>;
export type Secret = Stored<Lib.V1Secret>;
export type Event = Stored<Lib.CoreV1Event>;
export type Node = Stored<Lib.V1Node>;
export type Deployment = Stored<Lib.V1Deployment>;
export type TokenRequest = Stored<Lib.AuthenticationV1TokenRequest>;

/** An object as `helm template` renders it: kind, apiVersion and a name are always there. */
export type Rendered<T> = Plain<T> & {
  apiVersion: string;
  kind: string;
  metadata: Plain<Lib.V1ObjectMeta> & { name: string };
} & SpecOf<Plain<T>>;

/** The rendered kinds the tier looks into, by kind. */
export interface RenderedKinds {
  Deployment: Rendered<Lib.V1Deployment>;
  DaemonSet: Rendered<Lib.V1DaemonSet>;
  ClusterRole: Rendered<Lib.V1ClusterRole>;
}
