// Composes the two drivers from their backends for the configured mode: the controller half
// talks to Proxmox / the NFS server, the node half to this machine's kernel.
import type { Logger } from 'pino';
import type { AppConfig } from './config/types.js';
import type { Driver } from './csi/types.js';
import { createProxmoxController } from './proxmox/index.js';
import { PROXMOX_DRIVER_NAME } from './proxmox/contract.js';
import { NFS_DRIVER_NAME } from './nfs/contract.js';
import { createNfsController } from './nfs/controller/controller.js';
import { createProxmoxNode } from './proxmox/node/node.js';
import { createNfsNode } from './nfs/node/node.js';
import { createExec } from './os/index.js';
import { kubernetesNodeNames } from './proxmox/controller/helper-vms.js';

export const PROXMOX_DRIVER = PROXMOX_DRIVER_NAME;
export const NFS_DRIVER = NFS_DRIVER_NAME;

export interface Composed {
  drivers: { driver: Driver; endpoint: string }[];
  close(): Promise<void>;
}

export function buildDrivers(config: AppConfig, log: Logger): Composed {
  const controller = config.mode !== 'node';
  const node = config.mode !== 'controller';
  const exec = node ? createExec() : undefined;
  const drivers: Composed['drivers'] = [];
  const closers: (() => Promise<void>)[] = [];

  if (config.proxmoxEndpoint) {
    const plog = log.child({ driver: PROXMOX_DRIVER });
    // load.ts guarantees the config file whenever a Proxmox controller runs.
    const c = controller && config.proxmox ? createProxmoxController({ config: config.proxmox, log: plog, ...withKubernetesNodes() }) : undefined;
    if (c) closers.push(() => c.close());
    drivers.push({
      endpoint: config.proxmoxEndpoint,
      driver: {
        name: PROXMOX_DRIVER,
        accessibilityConstraints: true,
        onlineExpansion: true,
        // Probe: this process serves. Backend health goes to metrics and logs (health.ts).
        probe: async () => true,
        ...(c && { health: (signal: AbortSignal) => c.health(signal) }),
        ...(c && { controller: c }),
        ...(node && {
          node: createProxmoxNode({
            nodeId: config.node.nodeId,
            ...(config.node.region && { region: config.node.region }),
            ...(config.node.zone && { zone: config.node.zone }),
            deviceDir: config.deviceDir,
            kubeletDir: config.kubeletDir,
            log: plog,
            ...(exec && { exec }),
          }),
        }),
      },
    });
  }

  if (config.nfsEndpoint) {
    const nlog = log.child({ driver: NFS_DRIVER });
    const ports = { ...(config.nfsPort && { nfsPort: config.nfsPort }), ...(config.nfsMountPort && { mountPort: config.nfsMountPort }) };
    const c = controller ? createNfsController({ log: nlog, callTimeoutMs: config.nfsCallTimeoutMs, defaultOnDelete: config.nfsDefaultOnDelete, ...ports }) : undefined;
    if (c) closers.push(() => c.close());
    drivers.push({
      endpoint: config.nfsEndpoint,
      driver: {
        name: NFS_DRIVER,
        accessibilityConstraints: false,
        onlineExpansion: true,
        // Probe: this process serves. Backend health goes to metrics and logs (health.ts).
        probe: async () => true,
        ...(c && { health: (signal: AbortSignal) => c.health(signal) }),
        ...(c && { controller: c }),
        ...(node && {
          node: createNfsNode({
            nodeId: config.node.nodeId,
            log: nlog,
            mountTimeoutMs: config.nfsMountTimeoutMs,
            kubeletDir: config.kubeletDir,
            ...(config.nfsPort && { nfsPort: config.nfsPort }),
            ...(config.nfsMountPort && { nfsMountPort: config.nfsMountPort }),
            ...(exec && { exec }),
          }),
        }),
      },
    });
  }
  return { drivers, close: async () => void (await Promise.all(closers.map((f) => f()))) };
}

/** In a pod: the Kubernetes Node names limit offline-expansion helpers (src/proxmox/controller/helper-vms.ts). */
function withKubernetesNodes(): { kubernetesNodes?: NonNullable<ReturnType<typeof kubernetesNodeNames>> } {
  const k = kubernetesNodeNames();
  return k ? { kubernetesNodes: k } : {};
}
