// A driver for tests of the gRPC layer: named test.csi.example, always ready, no topology, no
// online expansion, and a controller that creates volume "v" and deletes anything unless the
// test gives its own handlers.
import type { ControllerBackend, Driver } from '../../src/csi/types.js';

export function testDriver(
  o: { controller?: Partial<ControllerBackend> } & Omit<Partial<Driver>, 'controller'> = {},
): Driver {
  const { controller, ...rest } = o;
  return {
    name: 'test.csi.example',
    accessibilityConstraints: false,
    onlineExpansion: false,
    probe: async () => true,
    controller: {
      capabilities: ['CREATE_DELETE_VOLUME'],
      createVolume: async () => ({ volume: { volumeId: 'v', capacityBytes: 0 } }),
      deleteVolume: async () => ({}),
      validateVolumeCapabilities: async () => ({}),
      ...controller,
    },
    ...rest,
  };
}
