// The CSI Controller service of one driver: checks the fields the spec requires, answers
// UNIMPLEMENTED for what the backend does not advertise, and dispatches to the driver's
// controller backend. The transport wraps every method in the interceptor
// (src/server/driver-server.ts, src/server/interceptor.ts).
import type { ControllerHandlers } from '../gen/csi/v1/Controller.js';
import type { ControllerBackend } from '../csi/types.js';
import type { ServiceSpecs } from '../csi/service-spec.js';
import { validate } from '../csi/validate.js';

const byVolume = (r: { volumeId: string }): string[] => [r.volumeId];

export function controllerService(c: ControllerBackend): ServiceSpecs<ControllerHandlers> {
  // A method the backend does not advertise is left undefined: the interceptor answers UNIMPLEMENTED.
  const has = (cap: string) => c.capabilities.includes(cap as never);
  return {
    CreateVolume: {
      keys: (r) => [`name:${r.name}`],
      validate: validate.createVolume,
      impl: c.createVolume,
    },
    DeleteVolume: {
      keys: byVolume,
      validate: validate.deleteVolume,
      impl: c.deleteVolume,
    },
    ControllerPublishVolume: {
      keys: byVolume,
      validate: validate.controllerPublishVolume,
      impl: has('PUBLISH_UNPUBLISH_VOLUME') ? c.controllerPublishVolume : undefined,
    },
    ControllerUnpublishVolume: {
      keys: byVolume,
      validate: validate.controllerUnpublishVolume,
      impl: has('PUBLISH_UNPUBLISH_VOLUME') ? c.controllerUnpublishVolume : undefined,
    },
    ValidateVolumeCapabilities: {
      validate: validate.validateVolumeCapabilities,
      impl: c.validateVolumeCapabilities,
    },
    ListVolumes: {
      impl: has('LIST_VOLUMES') ? c.listVolumes : undefined,
    },
    GetCapacity: {
      impl: has('GET_CAPACITY') ? c.getCapacity : undefined,
    },
    ControllerGetCapabilities: {
      impl: async () => ({ capabilities: c.capabilities.map((type) => ({ rpc: { type } })) }),
    },
    ControllerExpandVolume: {
      keys: byVolume,
      validate: validate.controllerExpandVolume,
      impl: has('EXPAND_VOLUME') ? c.controllerExpandVolume : undefined,
    },
    ControllerGetVolume: {
      validate: validate.controllerGetVolume,
      impl: has('GET_VOLUME') ? c.controllerGetVolume : undefined,
    },
    ControllerModifyVolume: {
      keys: byVolume,
      validate: validate.controllerModifyVolume,
      impl: has('MODIFY_VOLUME') ? c.controllerModifyVolume : undefined,
    },
    CreateSnapshot: {
      keys: (r) => [`snapshot:${r.name}`, r.sourceVolumeId],
      validate: validate.createSnapshot,
      impl: has('CREATE_DELETE_SNAPSHOT') ? c.createSnapshot : undefined,
    },
    DeleteSnapshot: {
      keys: (r) => [`snapshot-id:${r.snapshotId}`],
      validate: validate.deleteSnapshot,
      impl: has('CREATE_DELETE_SNAPSHOT') ? c.deleteSnapshot : undefined,
    },
    ListSnapshots: {
      validate: validate.listSnapshots,
      impl: has('LIST_SNAPSHOTS') ? c.listSnapshots : undefined,
    },
  };
}
