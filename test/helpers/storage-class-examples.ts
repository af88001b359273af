// One valid value for every StorageClass parameter each driver accepts: the chart-schema test
// renders them and the parameter tests start from them. A key added to a driver without one here
// fails test/helm/schema-params.test.ts.
import { FSTYPE_KEY } from '../../src/proxmox/contract.js';

export const PROXMOX_EXAMPLES: Record<string, string> = {
  storage: 'local-lvm',
  storageFormat: 'raw',
  aio: 'native',
  cache: 'none',
  ssd: 'true',
  backup: 'false',
  iothread: 'true',
  diskIOPS: '100',
  diskMBps: '10',
  blockSize: '4096',
  inodeSize: '256',
  replicate: 'false',
  replicateSchedule: '*/15',
  replicateZones: 'hyper1,hyper2',
  resizeRequired: 'false',
  resizeSizeBytes: '0',
  encrypted: 'false',
  [FSTYPE_KEY]: 'xfs',
};

export const NFS_EXAMPLES: Record<string, string> = {
  server: 'nas.example',
  share: '/volume1/k8s-volumes/talos',
  subDir: 'apps/data',
  mountPermissions: '0770',
  onDelete: 'retain',
  uid: '1000',
  gid: '1000',
};
