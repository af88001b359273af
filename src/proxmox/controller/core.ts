// State and helpers shared by the controller's RPC handlers: the clusters by region, volume
// handles resolved against them, capability checks, topology.
import type { Logger } from 'pino';
import type { HandlerOf } from '../../csi/bind.js';
import type * as T from '../../csi/types.js';
import { FailedPrecondition, NotFound } from '../../errors.js';
import { kindOf } from '../storage/kinds.js';
import type { StorageContentItem } from '../api/api.js';
import type { Cluster } from './state/cluster.js';
import { isMarkerName } from './params/mutable.js';
import type { StorageParams } from './params/params.js';
import {
  FSTYPE_KEY,
  FS_TYPES,
  PROXMOX_NODE_LABEL,
  PROXMOX_REGION_LABEL,
  TOPOLOGY_REGION_KEY,
  TOPOLOGY_ZONE_KEY,
} from '../contract.js';
import { type VolumeRef, diskOwner, parseVolumeId, volidOf } from '../volume-id.js';
import type { HelperVmNames } from './safety/expansion-helpers.js';
import type { PoolGuardSettings } from './safety/pool-guard.js';
import type { PoolUsage } from './state/pool-usage.js';
import type { DiskFacts } from './safety/ownership.js';

export interface Core {
  clusters: Map<string, Cluster>;
  /** First configured cluster: where volumes go when no topology names a region. */
  defaultRegion: string;
  controllerVmId: number;
  log: Logger;
  /** Per region: the VM names an offline expansion may borrow; absent = any VM (safety/expansion-helpers.ts). */
  helperVms?: Map<string, HelperVmNames>;
  /** The thin-pool guard's settings (safety/pool-guard.ts); absent or disabled: no guard. */
  poolGuard?: PoolGuardSettings;
  /** Per region: each storage's usage per host (state/pool-usage.ts). */
  pools?: Map<string, PoolUsage>;
}

/** An RPC handler of the controller backend, given the Core first (bound in controller.ts). */
export type ControllerHandler<K extends keyof T.ControllerBackend> = HandlerOf<Core, T.ControllerBackend, K>;

export interface ResolvedVolume {
  ref: VolumeRef;
  cluster: Cluster;
  volid: string;
}

/** What the ownership gate (safety/ownership.ts) needs to know about a disk. */
export const diskFacts = (core: Core, ref: Pick<VolumeRef, 'storage' | 'disk'>): DiskFacts => ({
  storage: ref.storage,
  disk: ref.disk,
  controllerVmId: core.controllerVmId,
});

/** A handle we can act on, or undefined (malformed, or a region this controller does not know). */
export function resolveVolume(core: Core, volumeId: string): ResolvedVolume | undefined {
  const ref = parseVolumeId(volumeId);
  // A VolumeAttributesClass marker (mutable.ts) is part of a volume, never one itself.
  if (!ref || isMarkerName(ref.disk)) return undefined;
  const cluster = core.clusters.get(ref.region);
  if (!cluster) return undefined;
  return { ref, cluster, volid: volidOf(ref.storage, ref.disk) };
}

/** Like resolveVolume, for calls that need the volume to exist: NotFound otherwise. */
export function requireVolume(core: Core, volumeId: string): ResolvedVolume {
  const v = resolveVolume(core, volumeId);
  if (v) return v;
  const ref = parseVolumeId(volumeId);
  throw new NotFound(
    ref && !isMarkerName(ref.disk)
      ? `volume ${volumeId}: no Proxmox cluster with region "${ref.region}" is configured (known: ${[...core.clusters.keys()].join(', ')})`
      : `volume ${volumeId} does not exist (not a region/zone/storage/disk handle of this driver)`,
  );
}

/**
 * The Proxmox node holding a volume: its zone, or for shared storages (upstream's handles leave
 * the zone empty there) any node that has it. A handle without a zone on a local storage is no
 * id either driver issued: it names no volume (docs/ownership.md, "Ids").
 */
export async function volumeNode(v: ResolvedVolume, signal?: AbortSignal): Promise<string | undefined> {
  if (v.ref.zone) return v.ref.zone;
  const rows = await v.cluster.storageRows(v.ref.storage, signal);
  if (!rows.some((r) => r.shared)) return undefined;
  return rows.find((r) => r.status === undefined || r.status === 'available')?.node;
}

/**
 * For the calls whose work is done once the volume is gone (delete, detach): a handle that is not
 * ours or names an unknown region has nothing to act on, and the answer is `{}`. Otherwise `fn`
 * runs in the volume's exclusive section.
 */
export async function ifOurVolume<R>(
  core: Core,
  volumeId: string,
  ctx: T.CallContext,
  nothingTo: string,
  fn: (v: ResolvedVolume) => Promise<R>,
): Promise<R | Record<string, never>> {
  const v = resolveVolume(core, volumeId);
  if (!v) {
    ctx.log.info(`volume handle is not one of ours or names an unknown region; nothing to ${nothingTo}`);
    return {};
  }
  return v.cluster.exclusive(v.volid, () => fn(v));
}

/** findVolume for calls on a volume that must exist: NotFound when the disk is not there. */
export async function foundVolume(
  v: ResolvedVolume,
  volumeId: string,
  signal?: AbortSignal,
): Promise<NonNullable<Awaited<ReturnType<typeof findVolume>>>> {
  const found = await findVolume(v, signal);
  if (!found) throw new NotFound(`volume ${volumeId} does not exist`);
  return found;
}

/**
 * The volume's storage content row (and the owner's other volumes on that storage: its
 * markers), or undefined when the disk is not there. `cached` takes the cluster's content view
 * when it has the disk (content-cache.ts); a miss is always read again.
 */
export async function findVolume(
  v: ResolvedVolume,
  signal?: AbortSignal,
  cached = false,
): Promise<{ node: string; item: StorageContentItem; items: StorageContentItem[] } | undefined> {
  const node = await volumeNode(v, signal);
  if (!node) return undefined;
  const nodes = (await v.cluster.storages(signal)).filter((r) => r.storage === v.ref.storage).map((r) => r.node);
  if (nodes.length > 0 && !nodes.includes(node)) return undefined;
  try {
    const owner = diskOwner(v.ref.disk);
    if (cached) {
      const { item, items } = await v.cluster.content.find(node, v.ref.storage, owner, v.volid, signal);
      return item ? { node, item, items } : undefined;
    }
    const items = await v.cluster.content.list(node, v.ref.storage, owner, signal, true);
    const item = items.find((i) => i.volid === v.volid);
    return item ? { node, item, items } : undefined;
  } catch (e) {
    if ((e as { kind?: string }).kind === 'NotFound') return undefined;
    throw e;
  }
}

const SINGLE_NODE = new Set([
  'SINGLE_NODE_WRITER',
  'SINGLE_NODE_READER_ONLY',
  'SINGLE_NODE_SINGLE_WRITER',
  'SINGLE_NODE_MULTI_WRITER',
]);

export function modeOf(cap: T.VolumeCapability | null | undefined): string {
  // unknown: protobufjs leaves an enum value this build does not know as its number.
  const m: unknown = cap?.accessMode?.mode;
  if (typeof m === 'string') return m;
  return typeof m === 'number' ? String(m) : 'UNKNOWN';
}

export const isSingleNode = (cap: T.VolumeCapability | null | undefined): boolean => SINGLE_NODE.has(modeOf(cap));

/** Why these capabilities cannot be served, or undefined when they can. */
export function capabilityProblem(
  caps: readonly T.VolumeCapability[],
  params?: Pick<StorageParams, 'fsType'>,
): string | undefined {
  for (const cap of caps) {
    const mode = modeOf(cap);
    if (!SINGLE_NODE.has(mode)) {
      return `access mode ${mode} is not supported: a Proxmox disk is attached to one VM at a time (use a single-node mode)`;
    }
    if (cap.block) {
      if (params?.fsType)
        return `parameter ${FSTYPE_KEY}=${params.fsType} conflicts with block access: a block volume has no filesystem`;
      continue;
    }
    if (cap.mount) {
      const fs = cap.mount.fsType.toLowerCase();
      if (fs !== '' && !(FS_TYPES as readonly string[]).includes(fs))
        return `fs_type "${cap.mount.fsType}" is not supported (use ${FS_TYPES.join(' or ')})`;
      if (fs !== '' && params?.fsType && fs !== params.fsType)
        return `fs_type "${fs}" conflicts with parameter ${FSTYPE_KEY}=${params.fsType}`;
      continue;
    }
    return 'a volume capability needs an access type (block or mount)';
  }
  return undefined;
}

export interface Placement {
  region?: string | undefined;
  zone?: string | undefined;
}

/** Candidate placements from accessibility requirements: preferred first, then requisite. */
export function placementsOf(
  req: { preferred?: T.Topology[]; requisite?: T.Topology[] } | null | undefined,
): Placement[] {
  const out: Placement[] = [];
  const seen = new Set<string>();
  for (const t of [...(req?.preferred ?? []), ...(req?.requisite ?? [])]) {
    const s = t.segments;
    const p: Placement = {
      region: s[TOPOLOGY_REGION_KEY] ?? s[PROXMOX_REGION_LABEL],
      zone: s[TOPOLOGY_ZONE_KEY] ?? s[PROXMOX_NODE_LABEL],
    };
    const key = `${p.region ?? ''}\u0000${p.zone ?? ''}`;
    if (!seen.has(key)) {
      seen.add(key);
      out.push(p);
    }
  }
  return out;
}

export function topologyOf(region: string, zone: string | undefined): T.Topology {
  return {
    segments: zone ? { [TOPOLOGY_REGION_KEY]: region, [TOPOLOGY_ZONE_KEY]: zone } : { [TOPOLOGY_REGION_KEY]: region },
  };
}

/**
 * Snapshots, restores and clones ride on the storage's own snapshot mechanism, which the driver
 * uses only where it has it (storage/kinds.ts): elsewhere FAILED_PRECONDITION saying why.
 */
export async function requireSnapshots(v: ResolvedVolume, what: string, signal?: AbortSignal): Promise<void> {
  const rows = await v.cluster.storageRows(v.ref.storage, signal);
  const type = rows.find((r) => r.plugintype)?.plugintype;
  const kind = kindOf(type);
  if (kind?.snapshots.supported) return;
  throw new FailedPrecondition(
    `${what} of ${v.volid} is not possible: storage ${v.ref.storage} is ${type ?? 'of an unknown type'}, and ${
      kind && !kind.snapshots.supported ? kind.snapshots.why : 'the driver does not serve it'
    } (snapshots work on LVM-thin storages; docs/features.md has the table)`,
  );
}

/** ControllerModifyVolume keeps its values in marker volumes: FAILED_PRECONDITION where none can exist. */
export async function requireMarkers(v: ResolvedVolume, signal?: AbortSignal): Promise<void> {
  const type = (await v.cluster.storageRows(v.ref.storage, signal)).find((r) => r.plugintype)?.plugintype;
  if (kindOf(type)?.markers !== false) return;
  throw new FailedPrecondition(
    `a VolumeAttributesClass cannot change ${v.volid}: storage ${v.ref.storage} is ${type ?? '?'}, whose volume names cannot carry the marker that keeps the values (works on lvmthin, lvm and rbd storages; docs/features.md)`,
  );
}
