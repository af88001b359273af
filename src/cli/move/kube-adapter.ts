// MoveKube on the day-2 subcommands' Kubernetes port (src/k8s). The library's object types carry
// the same JSON as move's own; a UID precondition that no longer matches (409) means the object
// was already replaced, which the state machine reads back instead of trusting the error.
import { isConflict, type KubeApi } from '../../k8s/index.js';
import type { MoveKube, PersistentVolume, PersistentVolumeClaim, Pod, VolumeAttachment } from './kube-port.js';

export function moveKube(k: KubeApi, signal?: AbortSignal): MoveKube {
  return {
    getPvc: async (ns, name) =>
      (await k.getPersistentVolumeClaim(ns, name, signal)) as PersistentVolumeClaim | undefined,
    getPv: async (name) => (await k.getPersistentVolume(name, signal)) as PersistentVolume | undefined,
    listPvs: async () => (await k.listPersistentVolumes(signal)) as PersistentVolume[],
    listVolumeAttachments: async () => (await k.listVolumeAttachments(signal)) as VolumeAttachment[],
    listPods: async (ns) => (await k.listPods(ns, signal)) as Pod[],
    patchPv: async (name, patch, resourceVersion) =>
      (await k.patchPersistentVolume(
        name,
        patch as Record<string, unknown>,
        resourceVersion === undefined ? {} : { resourceVersion },
      )) as PersistentVolume,
    patchPvc: async (ns, name, patch) =>
      (await k.patchPersistentVolumeClaim(ns, name, patch as Record<string, unknown>)) as PersistentVolumeClaim,
    // plain JSON objects: the library's serializer reads them by field name, as the tests show
    createPv: async (pv) => (await k.createPersistentVolume(pv)) as PersistentVolume,
    createPvc: async (pvc) => (await k.createPersistentVolumeClaim(pvc as never)) as PersistentVolumeClaim,
    deletePv: async (name, uid) => {
      try {
        await k.deletePersistentVolume(name, { uid });
      } catch (e) {
        if (!isConflict(e)) throw e;
      }
    },
    deletePvc: async (ns, name, uid) => {
      try {
        await k.deletePersistentVolumeClaim(ns, name, { uid });
      } catch (e) {
        if (!isConflict(e)) throw e;
      }
    },
  };
}
