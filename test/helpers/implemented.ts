// A CSI backend's optional methods (controllerPublishVolume?, nodeStageVolume?, ...) as a test
// calls them: the ones the backend under test is meant to implement are checked present once,
// and the result types them as present, so each call needs no non-null assertion.
import type { ControllerBackend, NodeBackend } from '../../src/csi/types.js';

export function implemented<B extends object, K extends keyof B>(
  backend: B,
  methods: readonly K[],
): B & Required<Pick<B, K>> {
  const missing = methods.filter((m) => typeof backend[m] !== 'function');
  if (missing.length > 0) throw new Error(`the backend does not implement ${missing.map(String).join(', ')}`);
  return backend as B & Required<Pick<B, K>>;
}

/** Every optional method of a controller backend (the Proxmox controller implements them all). */
export const CONTROLLER_METHODS = [
  'controllerPublishVolume',
  'controllerUnpublishVolume',
  'listVolumes',
  'getCapacity',
  'controllerExpandVolume',
  'controllerGetVolume',
  'controllerModifyVolume',
  'createSnapshot',
  'deleteSnapshot',
  'listSnapshots',
] as const satisfies readonly (keyof ControllerBackend)[];

/** Every optional method of a node backend (the Proxmox node implements them all). */
export const NODE_METHODS = [
  'nodeStageVolume',
  'nodeUnstageVolume',
  'nodeGetVolumeStats',
  'nodeExpandVolume',
] as const satisfies readonly (keyof NodeBackend)[];
