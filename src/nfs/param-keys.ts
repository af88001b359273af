// Every StorageClass parameter of nfs.csi.k8s.io (matched case-insensitively, like csi-driver-nfs;
// these are the canonical spellings). One source of truth: controller/params.ts reads them (each
// key's value parser sits beside its schema here; subDir's templates depend on the request and
// are expanded in controller/params.ts), the chart's
// values.schema.json `nfsParameters` is generated from `schema` (scripts/gen-chart-schema.ts;
// test/helm/schema-params.test.ts checks both ways) and docs/parameters.md from `doc` and `schema`.
import type { ParamDef } from '../csi/param-def.js';
import { InvalidArgument } from '../errors.js';
import { ON_DELETE, type OnDelete } from './contract.js';
import { checkServer, normaliseShare } from './path-rules.js';

/** An octal file mode such as "0775"; 0 and unset mean "leave the mode as created" (upstream). */
export function parseOctalMode(v: string | undefined, what: string): number | undefined {
  if (v === undefined || v === '') return undefined;
  if (!/^[0-7]{1,5}$/.test(v) || parseInt(v, 8) > 0o7777) {
    throw new InvalidArgument(`${what} "${v}" is not an octal file mode such as "0775"`);
  }
  const mode = parseInt(v, 8);
  return mode === 0 ? undefined : mode;
}

const numericId =
  (what: string) =>
  (v: string | undefined): number | undefined => {
    if (v === undefined || v === '') return undefined;
    if (!/^\d{1,10}$/.test(v) || Number(v) > 2147483647) {
      throw new InvalidArgument(`parameter "${what}" value "${v}" is not a numeric id between 0 and 2147483647`);
    }
    return Number(v);
  };

/** onDelete's value, any case; undefined = the driver's default (the chart's nfs.onDelete). */
function parseOnDelete(v: string | undefined): OnDelete | undefined {
  if (v === undefined || v === '') return undefined;
  const lower = v.toLowerCase() as OnDelete;
  if (!ON_DELETE.includes(lower)) {
    throw new InvalidArgument(`parameter "onDelete" value "${v}" is not one of ${ON_DELETE.join(', ')}`);
  }
  return lower;
}

export const NFS_PARAMETERS = {
  server: {
    doc: 'NFS server host name or address (required)',
    schema: { type: 'string' },
    parse: (v: string | undefined) => checkServer(v ?? ''),
  },
  share: {
    doc: 'exported path (required), e.g. /volume1/k8s-volumes/talos',
    schema: { type: 'string', pattern: '^(/.*)?$' },
    parse: (v: string | undefined) => normaliseShare(v ?? ''),
  },
  subDir: {
    doc: 'directory below the share; ${pvc.metadata.namespace}, ${pvc.metadata.name}, ${pv.metadata.name} are expanded; no ".." segment',
    schema: { type: 'string', not: { pattern: '(^|/)\\.\\.(/|$)' } },
  },
  mountPermissions: {
    doc: 'octal mode of the volume directory, e.g. 0770',
    schema: { type: ['string', 'integer'], pattern: '^([0-7]{1,4})?$' },
    parse: (v: string | undefined) => parseOctalMode(v, 'parameter "mountPermissions" value'),
  },
  onDelete: {
    doc: 'what DeleteVolume does with the directory: delete, retain or archive',
    schema: { enum: ['', 'delete', 'retain', 'archive', 'Delete', 'Retain', 'Archive'] },
    parse: parseOnDelete,
  },
  uid: {
    doc: 'ours: owner uid of the volume directory (no chown initContainer needed)',
    schema: { type: ['string', 'integer'], pattern: '^[0-9]{0,10}$', minimum: 0, maximum: 2147483647 },
    parse: numericId('uid'),
  },
  gid: {
    doc: 'ours: owner gid of the volume directory',
    schema: { type: ['string', 'integer'], pattern: '^[0-9]{0,10}$', minimum: 0, maximum: 2147483647 },
    parse: numericId('gid'),
  },
} satisfies Record<string, ParamDef>;
