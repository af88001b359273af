// How nfs.csi.k8s.io builds itself for the configured mode (src/csi/build.ts). Each half is
// imported only when served (dynamic import): a node plugin never loads the controller's NFS
// stores, a controller never the mount code.
import type { Logger } from 'pino';
import type { AppConfig } from '../config/types.js';
import type { DriverBuilder } from '../csi/build.js';
import { driverOf } from '../csi/build.js';
import type { GaugeSource } from '../csi/gauges.js';
import { NFS_DRIVER_NAME } from './contract.js';
import type { NfsStores } from './controller/store/store.js';

export { NFS_DRIVER_NAME };

export const nfsDriver: DriverBuilder = {
  name: NFS_DRIVER_NAME,
  endpoint: (config) => config.nfsEndpoint,
  async build({ config, log, controller, node, exec }) {
    const ports = {
      ...(config.nfsPort && { nfsPort: config.nfsPort }),
      ...(config.nfsMountPort && { mountPort: config.nfsMountPort }),
    };
    const gauges: GaugeSource[] = [];
    const copies =
      controller && config.metricsAddress
        ? new (await import('./controller/copy/copy-progress.js')).CopyProgress()
        : undefined;
    if (copies) gauges.push(copies);
    const c = controller
      ? (await import('./controller/controller.js')).createNfsController({
          log,
          callTimeoutMs: config.nfsCallTimeoutMs,
          defaultOnDelete: config.nfsDefaultOnDelete,
          ...ports,
          ...(copies && { copyProgress: copies }),
        })
      : undefined;
    const usage =
      node && config.metricsAddress ? (await import('./node/usage.js')).createVolumeUsage({ log }) : undefined;
    if (usage) gauges.push(usage);
    const n = node
      ? (await import('./node/node.js')).createNfsNode({
          nodeId: config.node.nodeId,
          log,
          mountTimeoutMs: config.nfsMountTimeoutMs,
          kubeletDir: config.kubeletDir,
          ...(config.nfsPort && { nfsPort: config.nfsPort }),
          ...(config.nfsMountPort && { nfsMountPort: config.nfsMountPort }),
          ...(exec && { exec }),
          ...(usage && { usage }),
        })
      : undefined;
    return {
      driver: driverOf(NFS_DRIVER_NAME, false, c, n),
      gauges,
      close: async () => {
        await c?.close();
      },
    };
  },
};

/** The NFS stores the findings metrics walk shares with (a reserved source port, as mount.nfs). */
export async function findingsStores(config: AppConfig, log: Logger): Promise<NfsStores> {
  return (await import('./controller/store/stores.js')).createNfsStores({
    timeoutMs: config.nfsCallTimeoutMs,
    privilegedPort: true,
    log,
    ...(config.nfsPort && { nfsPort: config.nfsPort }),
    ...(config.nfsMountPort && { mountPort: config.nfsMountPort }),
  });
}
