// The Kubernetes port of the day-2 subcommands (report, archives, move): the few API calls they
// make, in Kubernetes' own terms. client.ts implements it on @kubernetes/client-node; that module
// is loaded only by a subcommand (never by the CSI server: start time and memory). The object
// types are the library's, imported as types only (erased at run time).
import type * as Lib from '@kubernetes/client-node';

/**
 * The JSON shape of one of the library's model classes: the same fields, as plain data. Callers
 * build objects as literals (a PV to create, a fake in a test) and read what the library returns
 * (class instances, which fit this shape); nothing depends on the class identity.
 */
export type Plain<T> = T extends Date
  ? Date
  : T extends Array<infer U>
    ? Array<Plain<U>>
    : T extends object
      ? { [K in keyof T]: Plain<T[K]> }
      : T;

export type V1Namespace = Plain<Lib.V1Namespace>;
export type V1Node = Plain<Lib.V1Node>;
export type V1PersistentVolume = Plain<Lib.V1PersistentVolume>;
export type V1PersistentVolumeClaim = Plain<Lib.V1PersistentVolumeClaim>;
export type V1Pod = Plain<Lib.V1Pod>;
export type V1Secret = Plain<Lib.V1Secret>;
export type V1StorageClass = Plain<Lib.V1StorageClass>;
export type V1VolumeAttachment = Plain<Lib.V1VolumeAttachment>;

/** Where the credentials come from (client.ts loadKubeConfig). */
export interface KubeSource {
  /** A kubeconfig file (the --kubeconfig flag); else KUBECONFIG, ~/.kube/config, in-cluster. */
  kubeconfig?: string;
  /** A context of the kubeconfig other than its current one. */
  context?: string;
  env?: NodeJS.ProcessEnv;
  /** In-cluster: prefix of /var/run/secrets/kubernetes.io/serviceaccount (tests only). */
  serviceAccountRoot?: string;
}

/** A JSON merge patch (RFC 7386): null removes a key. */
export type MergePatch = Record<string, unknown>;

export interface WriteOptions {
  /** Only when the object still has this resourceVersion (optimistic concurrency): else Conflict. */
  resourceVersion?: string;
  /** Server-side dry run: validated and admitted, not persisted. */
  dryRun?: boolean;
}

export interface DeleteOptions {
  /** Only the object with this UID (not a successor of the same name): else Conflict. */
  uid?: string;
  resourceVersion?: string;
  dryRun?: boolean;
}

/** Annotation changes: a string sets, null removes. */
export type Annotations = Record<string, string | null>;

/**
 * Every list* method returns the whole list: it follows `metadata.continue` page after page and
 * fails rather than return part of one (day-2 decisions take what a list lacks for absent).
 */
export interface KubeApi {
  /** Where this talks to and as whom, for messages ("https://…:6443 as context admin@homelab"). */
  readonly describe: string;

  listPersistentVolumes(signal?: AbortSignal): Promise<V1PersistentVolume[]>;
  /** undefined when it does not exist. */
  getPersistentVolume(name: string, signal?: AbortSignal): Promise<V1PersistentVolume | undefined>;
  createPersistentVolume(pv: V1PersistentVolume, o?: WriteOptions): Promise<V1PersistentVolume>;
  patchPersistentVolume(name: string, patch: MergePatch, o?: WriteOptions): Promise<V1PersistentVolume>;
  /** Resolves false when it was already gone. */
  deletePersistentVolume(name: string, o?: DeleteOptions): Promise<boolean>;

  /** Every namespace. */
  listPersistentVolumeClaims(signal?: AbortSignal): Promise<V1PersistentVolumeClaim[]>;
  getPersistentVolumeClaim(
    namespace: string,
    name: string,
    signal?: AbortSignal,
  ): Promise<V1PersistentVolumeClaim | undefined>;
  createPersistentVolumeClaim(pvc: V1PersistentVolumeClaim, o?: WriteOptions): Promise<V1PersistentVolumeClaim>;
  patchPersistentVolumeClaim(
    namespace: string,
    name: string,
    patch: MergePatch,
    o?: WriteOptions,
  ): Promise<V1PersistentVolumeClaim>;
  deletePersistentVolumeClaim(namespace: string, name: string, o?: DeleteOptions): Promise<boolean>;

  listVolumeAttachments(signal?: AbortSignal): Promise<V1VolumeAttachment[]>;
  /** Pods of one namespace (move: who still uses a claim). */
  listPods(namespace: string, signal?: AbortSignal): Promise<V1Pod[]>;
  listNodes(signal?: AbortSignal): Promise<V1Node[]>;
  listStorageClasses(signal?: AbortSignal): Promise<V1StorageClass[]>;
  /** undefined when it does not exist (report: the cluster's age from kube-system). */
  getNamespace(name: string, signal?: AbortSignal): Promise<V1Namespace | undefined>;
  getSecret(namespace: string, name: string, signal?: AbortSignal): Promise<V1Secret | undefined>;
}

/** The merge patch that applies annotation changes (null removes one). */
export function annotationsPatch(changes: Annotations): MergePatch {
  return { metadata: { annotations: changes } };
}
