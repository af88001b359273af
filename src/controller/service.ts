// The CSI Controller service of one driver: checks the fields the spec requires, answers
// UNIMPLEMENTED for what the backend does not advertise, and dispatches to the driver's
// controller backend; every method goes through the interceptor (src/server/interceptor.ts).
import type { ControllerHandlers } from '../gen/csi/v1/Controller.js';
import type { ControllerBackend } from '../csi/types.js';
import { unary, type CallEnv } from '../server/interceptor.js';
import { validate } from '../csi/validate.js';

const byVolume = (r: { volumeId: string }): string[] => [r.volumeId];

export function controllerService(env: CallEnv, c: ControllerBackend): ControllerHandlers {
  // A method the backend does not advertise is left undefined: the interceptor answers UNIMPLEMENTED.
  const has = (cap: string) => c.capabilities.includes(cap as never);
  return {
    CreateVolume: unary(env, {
      method: 'CreateVolume',
      requestType: 'CreateVolumeRequest',
      keys: (r) => [`name:${r.name}`],
      validate: validate.createVolume,
      impl: c.createVolume,
    }),
    DeleteVolume: unary(env, {
      method: 'DeleteVolume',
      requestType: 'DeleteVolumeRequest',
      keys: byVolume,
      validate: validate.deleteVolume,
      impl: c.deleteVolume,
    }),
    ControllerPublishVolume: unary(env, {
      method: 'ControllerPublishVolume',
      requestType: 'ControllerPublishVolumeRequest',
      keys: byVolume,
      validate: validate.controllerPublishVolume,
      impl: has('PUBLISH_UNPUBLISH_VOLUME') ? c.controllerPublishVolume : undefined,
    }),
    ControllerUnpublishVolume: unary(env, {
      method: 'ControllerUnpublishVolume',
      requestType: 'ControllerUnpublishVolumeRequest',
      keys: byVolume,
      validate: validate.controllerUnpublishVolume,
      impl: has('PUBLISH_UNPUBLISH_VOLUME') ? c.controllerUnpublishVolume : undefined,
    }),
    ValidateVolumeCapabilities: unary(env, {
      method: 'ValidateVolumeCapabilities',
      requestType: 'ValidateVolumeCapabilitiesRequest',
      validate: validate.validateVolumeCapabilities,
      impl: c.validateVolumeCapabilities,
    }),
    ListVolumes: unary(env, {
      method: 'ListVolumes',
      requestType: 'ListVolumesRequest',
      impl: has('LIST_VOLUMES') ? c.listVolumes : undefined,
    }),
    GetCapacity: unary(env, {
      method: 'GetCapacity',
      requestType: 'GetCapacityRequest',
      impl: has('GET_CAPACITY') ? c.getCapacity : undefined,
    }),
    ControllerGetCapabilities: unary(env, {
      method: 'ControllerGetCapabilities',
      requestType: 'ControllerGetCapabilitiesRequest',
      impl: async () => ({ capabilities: c.capabilities.map((type) => ({ rpc: { type } })) }),
    }),
    ControllerExpandVolume: unary(env, {
      method: 'ControllerExpandVolume',
      requestType: 'ControllerExpandVolumeRequest',
      keys: byVolume,
      validate: validate.controllerExpandVolume,
      impl: has('EXPAND_VOLUME') ? c.controllerExpandVolume : undefined,
    }),
    ControllerGetVolume: unary(env, {
      method: 'ControllerGetVolume',
      requestType: 'ControllerGetVolumeRequest',
      validate: validate.controllerGetVolume,
      impl: has('GET_VOLUME') ? c.controllerGetVolume : undefined,
    }),
    ControllerModifyVolume: unary(env, {
      method: 'ControllerModifyVolume',
      requestType: 'ControllerModifyVolumeRequest',
      keys: byVolume,
      validate: validate.controllerModifyVolume,
      impl: has('MODIFY_VOLUME') ? c.controllerModifyVolume : undefined,
    }),
    // Snapshots are not offered by either backend; they answer UNIMPLEMENTED.
    CreateSnapshot: unary(env, { method: 'CreateSnapshot', requestType: 'CreateSnapshotRequest', impl: undefined }),
    DeleteSnapshot: unary(env, { method: 'DeleteSnapshot', requestType: 'DeleteSnapshotRequest', impl: undefined }),
    ListSnapshots: unary(env, { method: 'ListSnapshots', requestType: 'ListSnapshotsRequest', impl: undefined }),
  };
}
