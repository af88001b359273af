// Every StorageClass parameter of csi.proxmox.sinextra.dev: the keys proxmox-csi-plugin v0.19.1
// reads (its pkg/csi/parameters.go StorageParameters) plus the provisioner's fstype key. One
// source of truth: each key's parser sits beside its schema here (controller/params/params.ts
// applies them), the chart's values.schema.json `proxmoxParameters` is generated from `schema`
// (scripts/gen-chart-schema.ts; test/helm/schema-params.test.ts checks both ways) and
// docs/parameters.md from `doc` and `schema`. `schema` accepts exactly the values the driver
// accepts at CreateVolume.
import { InvalidArgument } from '../errors.js';
import { FS_TYPES, FSTYPE_KEY, type FsTypeName } from './contract.js';
import { DISK_FORMATS } from './storage/kind.js';
import { BOOL_FALSE, BOOL_TRUE, boolSpelling, type JsonSchema, type ParamDef } from '../csi/param-def.js';

const boolSchema: JsonSchema = { type: ['string', 'boolean'], enum: ['', ...BOOL_TRUE, ...BOOL_FALSE, true, false] };
const onlyFalse: JsonSchema = { type: ['string', 'boolean'], enum: ['', ...BOOL_FALSE, false] };
const countSchema: JsonSchema = { type: ['string', 'integer'], pattern: '^[0-9]*$', minimum: 0 };

export const AIO_MODES = ['native', 'threads', 'io_uring'] as const;
export const CACHE_MODES = ['none', 'writethrough', 'writeback', 'directsync', 'unsafe'] as const;

const bad = (key: string, value: string, want: string) =>
  new InvalidArgument(`parameter "${key}": "${value}" is not valid; expected ${want}`);

const bool =
  (key: string, dflt: boolean) =>
  (v: string | undefined): boolean => {
    if (v === undefined || v === '') return dflt;
    const b = boolSpelling(v);
    if (b === undefined) throw bad(key, v, 'true or false');
    return b;
  };

/** A whole number ≥ 0; 0 and unset are both "not set". */
const count =
  (key: string) =>
  (v: string | undefined): number | undefined => {
    if (v === undefined || v === '') return undefined;
    if (!/^\d+$/.test(v) || !Number.isSafeInteger(Number(v))) throw bad(key, v, 'a whole number ≥ 0');
    const n = Number(v);
    return n === 0 ? undefined : n;
  };

const pow2 =
  (key: string, min: number, max: number) =>
  (v: string | undefined): number | undefined => {
    const n = count(key)(v);
    if (n === undefined || v === undefined) return undefined;
    if (n < min || n > max || (n & (n - 1)) !== 0) throw bad(key, v, `a power of two between ${min} and ${max}`);
    return n;
  };

const oneOf =
  <T extends string>(key: string, values: readonly T[]) =>
  (v: string | undefined): T | undefined => {
    if (v === undefined || v === '') return undefined;
    if (!(values as readonly string[]).includes(v)) throw bad(key, v, values.join(', '));
    return v as T;
  };

function fsType(v: string | undefined): FsTypeName | undefined {
  if (v === undefined || v === '') return undefined;
  const lower = v.toLowerCase();
  if (!(FS_TYPES as readonly string[]).includes(lower)) throw bad(FSTYPE_KEY, v, FS_TYPES.join(' or '));
  return lower as FsTypeName;
}

export const PROXMOX_PARAMETERS = {
  storage: { doc: 'Proxmox storage id (required), e.g. local-lvm', schema: { type: 'string' } },
  storageFormat: {
    doc: 'disk format: raw (default) or qcow2; qcow2 only on a file storage (dir, nfs, cifs), refused on block storages (upstream silently used raw there)',
    schema: { enum: ['', ...DISK_FORMATS] },
    parse: oneOf('storageFormat', DISK_FORMATS),
  },
  aio: {
    doc: 'drive aio= mode: native, threads or io_uring',
    schema: { enum: ['', ...AIO_MODES] },
    parse: oneOf('aio', AIO_MODES),
  },
  cache: { doc: 'drive cache= mode', schema: { enum: ['', ...CACHE_MODES] }, parse: oneOf('cache', CACHE_MODES) },
  ssd: { doc: 'drive ssd=1 and discard=on', schema: boolSchema, parse: bool('ssd', false) },
  backup: {
    doc: 'drive backup=1 (included in vzdump backups); default false',
    schema: boolSchema,
    parse: bool('backup', false),
  },
  iothread: { doc: 'drive iothread=1; default true', schema: boolSchema, parse: bool('iothread', true) },
  diskIOPS: { doc: 'drive iops_rd and iops_wr', schema: countSchema, parse: count('diskIOPS') },
  diskMBps: { doc: 'drive mbps_rd and mbps_wr', schema: countSchema, parse: count('diskMBps') },
  blockSize: {
    doc: 'mkfs block size (power of two, 512..65536)',
    schema: countSchema,
    parse: pow2('blockSize', 512, 65536),
  },
  inodeSize: {
    doc: 'mkfs.ext4 inode size (power of two, 128..65536)',
    schema: countSchema,
    parse: pow2('inodeSize', 128, 65536),
  },
  replicate: {
    doc: 'Proxmox storage replication: upstream requires a zfspool storage; LVM-thin cannot replicate, so only false is accepted',
    schema: onlyFalse,
    // true parses, so params.ts can refuse it with the reason rather than "not valid"
    parse: bool('replicate', false),
  },
  replicateSchedule: {
    doc: 'replication schedule; read by upstream only with replicate=true, so it has no effect here',
    schema: { type: 'string' },
  },
  replicateZones: {
    doc: 'replication target zones; read by upstream only with replicate=true, so it has no effect here',
    schema: { type: 'string' },
  },
  resizeRequired: {
    doc: 'upstream bookkeeping for volumes restored from a snapshot (grown on first publish); a restore here is sized at CreateVolume, so only false is accepted',
    schema: onlyFalse,
    parse: bool('resizeRequired', false),
  },
  resizeSizeBytes: {
    doc: 'upstream bookkeeping for volumes restored from a snapshot; a restore here is sized at CreateVolume from the PVC, so only 0 is accepted',
    schema: { type: ['string', 'integer'], pattern: '^0*$', enum: ['', '0', 0] },
  },
  encrypted: {
    // ours, not upstream's. The node-stage secret that turns on LUKS never reaches CreateVolume
    // (the provisioner strips csi.storage.k8s.io/* keys), so this is how a class makes the node
    // refuse to stage a volume unencrypted even when that Secret comes up empty.
    doc: 'ours: the node refuses to stage the volume without LUKS (the node-stage secret carries the passphrase)',
    schema: boolSchema,
    parse: bool('encrypted', false),
  },
  [FSTYPE_KEY]: { doc: 'filesystem: ext4 (default) or xfs', schema: { enum: ['', 'ext4', 'xfs'] }, parse: fsType },
} satisfies Record<string, ParamDef>;

export const PROXMOX_PARAMETER_KEYS: ReadonlySet<string> = new Set(Object.keys(PROXMOX_PARAMETERS));
