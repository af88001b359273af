// What the two halves of nfs.csi.k8s.io must agree on, in one place: the controller writes the
// volume handle and volume context, the node reads them (as do static PVs and inline volumes,
// whose volumeAttributes use the same keys). The values are upstream csi-driver-nfs's.

export const NFS_DRIVER_NAME = 'nfs.csi.k8s.io';

/** volume_context keys, matched case-insensitively by the node like upstream. */
export const NFS_CONTEXT = {
  server: 'server',
  share: 'share',
  subDir: 'subDir',
  /** Comma-separated, appended to the mount flags. */
  mountOptions: 'mountOptions',
  /** Octal mode (e.g. 0770), chmod after mount. */
  mountPermissions: 'mountPermissions',
  /** Added by the external-provisioner (--extra-create-metadata); fill subDir templates. */
  pvcNamespace: 'csi.storage.k8s.io/pvc/namespace',
  pvcName: 'csi.storage.k8s.io/pvc/name',
  pvName: 'csi.storage.k8s.io/pv/name',
  /** Set by kubelet for a CSI inline volume of a pod. */
  ephemeral: 'csi.storage.k8s.io/ephemeral',
} as const;

/** The subDir templates and the context key each is filled from. */
export const SUBDIR_TEMPLATES = {
  'pvc.metadata.namespace': NFS_CONTEXT.pvcNamespace,
  'pvc.metadata.name': NFS_CONTEXT.pvcName,
  'pv.metadata.name': NFS_CONTEXT.pvName,
} as const;

/**
 * The volume handle, server#share#subDir#uuid#onDelete: the controller composes it (volume-id.ts),
 * the node reads it. What DeleteVolume does with the directory (OnDelete) is its 5th field, so
 * the codec defines it and the contract passes it on (one direction: contract › volume-id).
 */
export { parseVolumeId, ON_DELETE, type OnDelete } from './volume-id.js';
