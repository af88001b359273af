// Composes the two drivers from their backends for the configured mode.
import type { Logger } from 'pino';
import type { AppConfig } from './config/types.js';
import type { Driver } from './csi/types.js';

export const PROXMOX_DRIVER = 'csi.proxmox.sinextra.dev';
export const NFS_DRIVER = 'nfs.csi.k8s.io';

export function buildDrivers(config: AppConfig, _log: Logger): { driver: Driver; endpoint: string }[] {
  const out: { driver: Driver; endpoint: string }[] = [];
  if (config.proxmoxEndpoint) {
    out.push({
      endpoint: config.proxmoxEndpoint,
      driver: { name: PROXMOX_DRIVER, accessibilityConstraints: true, onlineExpansion: true, probe: async () => true },
    });
  }
  if (config.nfsEndpoint) {
    out.push({
      endpoint: config.nfsEndpoint,
      driver: { name: NFS_DRIVER, accessibilityConstraints: false, onlineExpansion: true, probe: async () => true },
    });
  }
  return out;
}
