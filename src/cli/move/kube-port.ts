// What `move` needs from the Kubernetes API, in its own terms, so the state machine can be driven
// by the real API server (src/k8s client) or anything else that keeps the same semantics.
// Objects are the API's JSON; only the fields move reads are typed.

export interface ObjectMeta {
  name: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: Array<{
    apiVersion: string;
    kind: string;
    name: string;
    uid: string;
    controller?: boolean;
    blockOwnerDeletion?: boolean;
  }>;
}

export interface PersistentVolume {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec: {
    capacity?: Record<string, string>;
    accessModes?: string[];
    volumeMode?: string;
    storageClassName?: string;
    mountOptions?: string[];
    persistentVolumeReclaimPolicy?: string;
    volumeAttributesClassName?: string;
    claimRef?: {
      apiVersion?: string;
      kind?: string;
      namespace?: string;
      name?: string;
      uid?: string;
      resourceVersion?: string;
    };
    csi?: {
      driver: string;
      volumeHandle: string;
      fsType?: string;
      readOnly?: boolean;
      volumeAttributes?: Record<string, string>;
      [secretRef: string]: unknown;
    };
    nodeAffinity?: {
      required?: {
        nodeSelectorTerms: Array<{ matchExpressions?: Array<{ key: string; operator: string; values?: string[] }> }>;
      };
    };
    [other: string]: unknown;
  };
  status?: { phase?: string };
}

export interface PersistentVolumeClaim {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec: {
    accessModes?: string[];
    resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
    storageClassName?: string;
    volumeMode?: string;
    volumeName?: string;
    selector?: unknown;
    volumeAttributesClassName?: string;
    dataSource?: unknown;
    dataSourceRef?: unknown;
  };
  status?: { phase?: string; capacity?: Record<string, string> };
}

export interface VolumeAttachment {
  metadata: ObjectMeta;
  spec: { attacher: string; nodeName: string; source: { persistentVolumeName?: string } };
  status?: { attached?: boolean };
}

export interface Pod {
  metadata: ObjectMeta;
  spec: { nodeName?: string; volumes?: Array<{ name: string; persistentVolumeClaim?: { claimName: string } }> };
  status?: { phase?: string };
}

export interface MoveKube {
  getPvc(namespace: string, name: string): Promise<PersistentVolumeClaim | undefined>;
  getPv(name: string): Promise<PersistentVolume | undefined>;
  listPvs(): Promise<PersistentVolume[]>;
  listVolumeAttachments(): Promise<VolumeAttachment[]>;
  listPods(namespace: string): Promise<Pod[]>;
  /** JSON merge patch; with `resourceVersion` only if the PV has not changed (else status 409). */
  patchPv(name: string, patch: unknown, resourceVersion?: string): Promise<PersistentVolume>;
  patchPvc(namespace: string, name: string, patch: unknown): Promise<PersistentVolumeClaim>;
  /** Rejects with an error whose `status` is 409 when the name is taken. */
  createPv(pv: PersistentVolume): Promise<PersistentVolume>;
  createPvc(pvc: PersistentVolumeClaim): Promise<PersistentVolumeClaim>;
  /** Deletes only the object with that UID (a precondition); a missing object is no error. */
  deletePv(name: string, uid: string): Promise<void>;
  deletePvc(namespace: string, name: string, uid: string): Promise<void>;
}
