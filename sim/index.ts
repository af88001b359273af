// Programmatic entry point of the Proxmox VE API simulator (see docs/simulator.md).

export { startSimulator } from './simulator.js';
export type { RunningSimulator, StartOptions } from './simulator.js';
export { SimulatorAdmin } from './admin-client.js';
export { DEFAULT_FAULTS } from './faults.js';
export type { Faults, DetachPendingMode } from './faults.js';
export type { Counters, RequestLogEntry } from './requestlog.js';
export type { BackendKind } from './backend/types.js';
export { DEFAULT_CONFIG_PATH } from './config.js';
