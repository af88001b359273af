// A Proxmox API whose mutating half refuses: for code that needs a full ProxmoxApi to build its
// views (a Cluster builds its ownership port from one) but must never change Proxmox, such as
// the metrics' findings scan over the controller's read-only API.
import type { ProxmoxApi, ProxmoxReadApi, ProxmoxWriteApi } from './api.js';

const WRITES: ReadonlySet<string> = new Set<keyof ProxmoxWriteApi>([
  'allocDisk',
  'freeDisk',
  'updateVmConfig',
  'unlinkDisks',
  'resizeDisk',
]);

export function withoutWrites(api: ProxmoxReadApi): ProxmoxApi {
  return new Proxy(api, {
    get(target, key, receiver) {
      if (typeof key === 'string' && WRITES.has(key))
        return () => Promise.reject(new Error(`Proxmox API: ${key} on a read-only view`));
      return Reflect.get(target, key, receiver) as unknown;
    },
  }) as ProxmoxApi;
}
