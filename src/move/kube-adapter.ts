// MoveKube on the day-2 subcommands' Kubernetes port (src/k8s). The library's object types carry
// the same JSON as move's own; a UID precondition that no longer matches (409) means the object
// was already replaced, which the state machine reads back instead of trusting the error.
import { isConflict, type KubeApi } from '../k8s/index.js';
import type { MoveKube, PersistentVolume, PersistentVolumeClaim, Pod, VolumeAttachment } from './kube-port.js';

export function moveKube(k: KubeApi, signal?: AbortSignal): MoveKube {
  const cast = <T>(v: unknown) => v as T;
  return {
    getPvc: async (ns, name) => cast<PersistentVolumeClaim | undefined>(await k.getPersistentVolumeClaim(ns, name, signal)),
    getPv: async (name) => cast<PersistentVolume | undefined>(await k.getPersistentVolume(name, signal)),
    listPvs: async () => cast<PersistentVolume[]>(await k.listPersistentVolumes(signal)),
    listVolumeAttachments: async () => cast<VolumeAttachment[]>(await k.listVolumeAttachments(signal)),
    listPods: async (ns) => cast<Pod[]>(await k.listPods(ns, signal)),
    patchPv: async (name, patch) => cast<PersistentVolume>(await k.patchPersistentVolume(name, patch as Record<string, unknown>)),
    patchPvc: async (ns, name, patch) => cast<PersistentVolumeClaim>(await k.patchPersistentVolumeClaim(ns, name, patch as Record<string, unknown>)),
    createPv: async (pv) => cast<PersistentVolume>(await k.createPersistentVolume(pv as never)),
    createPvc: async (pvc) => cast<PersistentVolumeClaim>(await k.createPersistentVolumeClaim(pvc as never)),
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
