// Public surface of the Proxmox backend for src/main.ts and the tests.
export {
  createProxmoxController,
  PROXMOX_CONTROLLER_CAPABILITIES,
  PROXMOX_DRIVER_NAME,
} from './controller/controller.js';
export type { ProxmoxController, ProxmoxControllerOptions } from './controller/controller.js';
export type { ProxmoxApi } from './api/api.js';
export { createHttpProxmoxApi } from './api/http-api.js';
export { parseVolumeId, formatVolumeId, diskNameFor } from './volume-id.js';
export { wwnForSlot, FSTYPE_KEY } from './contract.js';
