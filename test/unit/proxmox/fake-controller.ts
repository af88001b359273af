// The Proxmox controller over an in-process API (the fake, or one that wraps it to inject faults).
import { pino } from 'pino';
import type { ProxmoxApi } from '../../../src/proxmox/api/api.js';
import {
  createProxmoxController,
  type ProxmoxController,
  type ProxmoxControllerOptions,
} from '../../../src/proxmox/controller/controller.js';
import { CONTROLLER_METHODS, implemented } from '../../helpers/implemented.js';

export function controllerOn(
  api: ProxmoxApi,
  o: Pick<ProxmoxControllerOptions, 'poolGuard'> = {},
): ProxmoxController & Required<Pick<ProxmoxController, (typeof CONTROLLER_METHODS)[number]>> {
  const backend = createProxmoxController({
    config: {
      clusters: [{ url: 'https://unused', insecure: false, tokenId: 'a@pve!b', tokenSecret: 'x', region: 'homelab' }],
      controllerVmId: 9999,
    },
    log: pino({ level: 'silent' }),
    api: () => api,
    tuning: { queue: { confirmTimeoutMs: 200 } },
    ...o,
  });
  return implemented(backend, CONTROLLER_METHODS);
}
