// Public surface of the Proxmox backend for the subcommands (src/cli): what they use of the
// driver. The program builds the driver through driver.ts (src/drivers.ts).
export { PROXMOX_DRIVER_NAME } from './controller/controller.js';
export { createHttpProxmoxApi, type HttpProxmoxApi } from './api/http-api.js';
export { BASE_ROLE, CSI_ROLE_PRIVILEGES, MOVE_ROLE, SNAPSHOT_ROLE, type ProxmoxRole } from './roles.js';
export { parseVolumeId, formatVolumeId, parseVolid, volidOf } from './volume-id.js';
export { TOPOLOGY_REGION_KEY, TOPOLOGY_ZONE_KEY } from './contract.js';
export { parseCreateParameters } from './controller/params/params.js';
export { MOVER_VM_NAME, MoverVm, volidOfValue, type MoverApi, type MoverReadApi } from './mover-vm.js';
export { isOwnershipRefusal } from './controller/safety/ownership.js';
export { kindOf, SERVED_TYPES } from './storage/kinds.js';
