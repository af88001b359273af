// Public surface of the Proxmox backend for src/main.ts, the subcommands (src/cli) and the tests.
export {
  createProxmoxController,
  PROXMOX_CONTROLLER_CAPABILITIES,
  PROXMOX_DRIVER_NAME,
} from './controller/controller.js';
export type { ProxmoxController, ProxmoxControllerOptions } from './controller/controller.js';
export type { ProxmoxApi } from './api/api.js';
export { createHttpProxmoxApi, type HttpProxmoxApi } from './api/http-api.js';
export { BASE_ROLE, CSI_ROLE_PRIVILEGES, MOVE_ROLE, SNAPSHOT_ROLE, type ProxmoxRole } from './roles.js';
export { waitTask } from './api/tasks.js';
export { parseVolumeId, formatVolumeId, diskNameFor, parseVolid, volidOf } from './volume-id.js';
export { wwnForSlot, FSTYPE_KEY, TOPOLOGY_REGION_KEY, TOPOLOGY_ZONE_KEY } from './contract.js';
export { parseCreateParameters } from './controller/params/params.js';
export { MOVER_VM_NAME, MoverVm, volidOfValue, type MoverApi, type MoverReadApi } from './mover-vm.js';
export { isOwnershipRefusal } from './controller/safety/ownership.js';
export { kindOf, SERVED_TYPES } from './storage/kinds.js';
