// Entry to the Kubernetes port for subcommands. openKube loads the client library on first use
// (dynamic import), so importing this module costs nothing: the CSI server never imports it, and
// a subcommand pays for the library only when it talks to Kubernetes.
import type { KubeApi, KubeSource } from './api.js';

export type {
  KubeApi,
  KubeSource,
  V1PersistentVolume,
  V1PersistentVolumeClaim,
  V1StorageClass,
  V1VolumeAttachment,
} from './api.js';
export { annotationsPatch } from './api.js';
export { isConflict, isKubeError } from './errors.js';

export async function openKube(src: KubeSource = {}): Promise<KubeApi> {
  const { connectKube } = await import('./client.js');
  return connectKube(src);
}
