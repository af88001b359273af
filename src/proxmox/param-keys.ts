// Every StorageClass parameter of csi.proxmox.sinextra.dev: the keys proxmox-csi-plugin v0.19.1
// reads (its pkg/csi/parameters.go StorageParameters) plus the provisioner's fstype key. One
// source of truth: params.ts parses them, and the chart's values.schema.json `proxmoxParameters`
// is generated from `schema` here (scripts/gen-chart-schema.ts; test/helm/schema-params.test.ts
// checks both ways). `schema` accepts exactly the values the driver accepts at CreateVolume.
import { FSTYPE_KEY } from './contract.js';
import type { JsonSchema, ParamDef } from '../csi/param-def.js';

const BOOL_TRUE = ['1', 't', 'T', 'true', 'TRUE', 'True'];
const BOOL_FALSE = ['0', 'f', 'F', 'false', 'FALSE', 'False'];
const bool: JsonSchema = { type: ['string', 'boolean'], enum: ['', ...BOOL_TRUE, ...BOOL_FALSE, true, false] };
const onlyFalse: JsonSchema = { type: ['string', 'boolean'], enum: ['', ...BOOL_FALSE, false] };
const count: JsonSchema = { type: ['string', 'integer'], pattern: '^[0-9]*$', minimum: 0 };

export const AIO_MODES = ['native', 'threads', 'io_uring'] as const;
export const CACHE_MODES = ['none', 'writethrough', 'writeback', 'directsync', 'unsafe'] as const;

export const PROXMOX_PARAMETERS: Record<string, ParamDef> = {
  storage: { doc: 'Proxmox storage id (required), e.g. local-lvm', schema: { type: 'string' } },
  storageFormat: {
    doc: 'disk format; LVM-thin stores raw only (upstream silently used raw on block storages; a qcow2/vmdk request is refused here)',
    schema: { enum: ['', 'raw'] },
  },
  aio: { doc: 'drive aio= mode: native, threads or io_uring', schema: { enum: ['', ...AIO_MODES] } },
  cache: { doc: 'drive cache= mode', schema: { enum: ['', ...CACHE_MODES] } },
  ssd: { doc: 'drive ssd=1 and discard=on', schema: bool },
  backup: { doc: 'drive backup=1 (included in vzdump backups); default false', schema: bool },
  iothread: { doc: 'drive iothread=1; default true', schema: bool },
  diskIOPS: { doc: 'drive iops_rd and iops_wr', schema: count },
  diskMBps: { doc: 'drive mbps_rd and mbps_wr', schema: count },
  blockSize: { doc: 'mkfs block size (power of two, 512..65536)', schema: count },
  inodeSize: { doc: 'mkfs.ext4 inode size (power of two, 128..65536)', schema: count },
  replicate: {
    doc: 'Proxmox storage replication: upstream requires a zfspool storage; LVM-thin cannot replicate, so only false is accepted',
    schema: onlyFalse,
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
    doc: 'upstream bookkeeping for volumes restored from a snapshot (grown on first publish); no snapshots here, so only false is accepted',
    schema: onlyFalse,
  },
  resizeSizeBytes: {
    doc: 'upstream bookkeeping for volumes restored from a snapshot; no snapshots here, so only 0 is accepted (the size comes from the PVC)',
    schema: { type: ['string', 'integer'], pattern: '^0*$', enum: ['', '0', 0] },
  },
  encrypted: {
    // ours, not upstream's. The node-stage secret that turns on LUKS never reaches CreateVolume
    // (the provisioner strips csi.storage.k8s.io/* keys), so this is how a class makes the node
    // refuse to stage a volume unencrypted even when that Secret comes up empty.
    doc: 'ours: the node refuses to stage the volume without LUKS (the node-stage secret carries the passphrase)',
    schema: bool,
  },
  [FSTYPE_KEY]: { doc: 'filesystem: ext4 (default) or xfs', schema: { enum: ['', 'ext4', 'xfs'] } },
};

export const PROXMOX_PARAMETER_KEYS: ReadonlySet<string> = new Set(Object.keys(PROXMOX_PARAMETERS));
