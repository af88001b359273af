// Every StorageClass parameter of nfs.csi.k8s.io (matched case-insensitively, like csi-driver-nfs;
// these are the canonical spellings). One source of truth: params.ts parses them, and the
// chart's values.schema.json `nfsParameters` is generated from `schema` here
// (scripts/gen-chart-schema.ts; test/helm/schema-params.test.ts checks both ways).
import type { ParamDef } from '../csi/param-def.js';

export const NFS_PARAMETERS: Record<string, ParamDef> = {
  server: { doc: 'NFS server host name or address (required)', schema: { type: 'string' } },
  share: {
    doc: 'exported path (required), e.g. /volume1/k8s-volumes/talos',
    schema: { type: 'string', pattern: '^(/.*)?$' },
  },
  subDir: {
    doc: 'directory below the share; ${pvc.metadata.namespace}, ${pvc.metadata.name}, ${pv.metadata.name} are expanded; no ".." segment',
    schema: { type: 'string', not: { pattern: '(^|/)\\.\\.(/|$)' } },
  },
  mountPermissions: {
    doc: 'octal mode of the volume directory, e.g. 0770',
    schema: { type: ['string', 'integer'], pattern: '^([0-7]{1,4})?$' },
  },
  onDelete: {
    doc: 'what DeleteVolume does with the directory: delete, retain or archive',
    schema: { enum: ['', 'delete', 'retain', 'archive', 'Delete', 'Retain', 'Archive'] },
  },
  uid: {
    doc: 'ours: owner uid of the volume directory (no chown initContainer needed)',
    schema: { type: ['string', 'integer'], pattern: '^[0-9]{0,10}$', minimum: 0, maximum: 2147483647 },
  },
  gid: {
    doc: 'ours: owner gid of the volume directory',
    schema: { type: ['string', 'integer'], pattern: '^[0-9]{0,10}$', minimum: 0, maximum: 2147483647 },
  },
};
