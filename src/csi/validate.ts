// Checks of required fields that the CSI spec defines for every driver alike; backends validate
// their own parameters. csi-sanity expects INVALID_ARGUMENT for each missing field.
import type * as T from './types.js';
import { parseCapacityRange } from './capacity.js';
import { InvalidArgument } from '../errors.js';
import { CONTROL_CHARACTER } from '../control-characters.js';

/** Refuses a string field that holds a control character (one check for both drivers). */
export function noControlCharacters(value: unknown, name: string, method: string): void {
  if (typeof value !== 'string') return;
  const m = CONTROL_CHARACTER.exec(value);
  if (m) {
    const code = m[0].charCodeAt(0).toString(16).padStart(2, '0');
    throw new InvalidArgument(
      `${method}: ${name} contains a control character (U+00${code.toUpperCase()} at offset ${m.index}); names, ids and paths must be printable`,
    );
  }
}

/**
 * The same for every key and value of a string map (parameters, volume and publish contexts,
 * mutable parameters): their values become mount sources, subdirectories and drive options.
 * Secrets are left alone: a passphrase is the user's bytes and never reaches a path or argv.
 */
function noControlInMap(map: Record<string, string> | null | undefined, name: string, method: string): void {
  for (const [k, v] of Object.entries(map ?? {})) {
    noControlCharacters(k, `${name} key`, method);
    noControlCharacters(v, `${name}[${JSON.stringify(k.slice(0, 64))}]`, method);
  }
}

function mountFlags(cap: T.VolumeCapability | null | undefined, method: string): void {
  (cap?.mount?.mountFlags ?? []).forEach((f, i) => noControlCharacters(f, `mount_flags[${i}]`, method));
}

/** Refuses a missing value; after it the value is known to be there (an assertion signature). */
function need(value: unknown, name: string, method: string): asserts value {
  if (value === undefined || value === null || value === '')
    throw new InvalidArgument(`${method}: ${name} is required`);
  noControlCharacters(value, name, method);
}

export function capability(cap: T.VolumeCapability | null | undefined, name: string, method: string): void {
  need(cap, name, method);
  if (!cap.accessMode || cap.accessMode.mode === 'UNKNOWN')
    throw new InvalidArgument(`${method}: ${name}.access_mode is required`);
  if (!cap.block && !cap.mount) throw new InvalidArgument(`${method}: ${name} needs an access type (block or mount)`);
  mountFlags(cap, method);
}

function capabilities(caps: T.VolumeCapability[] | undefined, method: string): void {
  if (!caps || caps.length === 0) throw new InvalidArgument(`${method}: volume_capabilities is required`);
  caps.forEach((c, i) => capability(c, `volume_capabilities[${i}]`, method));
}

/** The keys of R whose values are V (optional ones too). */
type Fields<R, V> = { [K in keyof R]-?: R[K] extends V ? K : never }[keyof R] & string;

/** A request's field checks, by the fields' names (the messages print the spec's snake_case). */
interface Rules<R> {
  /** Present and printable. */
  need?: Fields<R, unknown>[];
  /** Printable where present. */
  printable?: Fields<R, string | null | undefined>[];
  capability?: Fields<R, T.VolumeCapability | null | undefined>;
  capabilities?: Fields<R, T.VolumeCapability[] | undefined>;
  /** String maps: keys and values printable. */
  maps?: Fields<R, Record<string, string> | null | undefined>[];
}

const snake = (field: string) => field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/**
 * The validator of one RPC's request: its rules in a fixed order (required fields, printable
 * ones, capabilities, maps), then `more`. Which error a request with several faults gets
 * depends on that order.
 */
function rules<R extends object>(method: string, c: Rules<R>, more?: (r: R) => void): (r: R) => void {
  return (r) => {
    for (const f of c.need ?? []) need(r[f], snake(f), method);
    for (const f of c.printable ?? []) noControlCharacters(r[f], snake(f), method);
    // The casts restate what Fields<> guaranteed for each key.
    if (c.capability) {
      capability(r[c.capability] as T.VolumeCapability | null | undefined, snake(c.capability), method);
    }
    if (c.capabilities) capabilities(r[c.capabilities] as T.VolumeCapability[] | undefined, method);
    for (const f of c.maps ?? []) noControlInMap(r[f] as Record<string, string> | null | undefined, snake(f), method);
    more?.(r);
  };
}

const nodePublishStaged = rules<T.NodePublishVolumeRequest>('NodePublishVolume', {
  need: ['volumeId', 'targetPath', 'stagingTargetPath'],
  capability: 'volumeCapability',
  maps: ['volumeContext', 'publishContext'],
});
const nodePublishUnstaged = rules<T.NodePublishVolumeRequest>('NodePublishVolume', {
  need: ['volumeId', 'targetPath'],
  printable: ['stagingTargetPath'],
  capability: 'volumeCapability',
  maps: ['volumeContext', 'publishContext'],
});

export const validate = {
  createVolume: rules<T.CreateVolumeRequest>(
    'CreateVolume',
    { need: ['name'], capabilities: 'volumeCapabilities', maps: ['parameters', 'mutableParameters'] },
    (r) => parseCapacityRange(r.capacityRange),
  ),
  deleteVolume: rules<T.DeleteVolumeRequest>('DeleteVolume', { need: ['volumeId'] }),
  createSnapshot: rules<T.CreateSnapshotRequest>('CreateSnapshot', {
    need: ['name', 'sourceVolumeId'],
    maps: ['parameters'],
  }),
  deleteSnapshot: rules<T.DeleteSnapshotRequest>('DeleteSnapshot', { need: ['snapshotId'] }),
  listSnapshots: rules<T.ListSnapshotsRequest>('ListSnapshots', {}, (r) => {
    if (r.maxEntries < 0) throw new InvalidArgument('ListSnapshots: max_entries must not be negative');
  }),
  controllerPublishVolume: rules<T.ControllerPublishVolumeRequest>('ControllerPublishVolume', {
    need: ['volumeId', 'nodeId'],
    capability: 'volumeCapability',
    maps: ['volumeContext'],
  }),
  controllerUnpublishVolume: rules<T.ControllerUnpublishVolumeRequest>('ControllerUnpublishVolume', {
    need: ['volumeId'],
    printable: ['nodeId'],
  }),
  validateVolumeCapabilities: rules<T.ValidateVolumeCapabilitiesRequest>('ValidateVolumeCapabilities', {
    need: ['volumeId'],
    capabilities: 'volumeCapabilities',
  }),
  controllerExpandVolume: rules<T.ControllerExpandVolumeRequest>(
    'ControllerExpandVolume',
    { need: ['volumeId', 'capacityRange'] },
    (r) => parseCapacityRange(r.capacityRange),
  ),
  controllerModifyVolume: rules<T.ControllerModifyVolumeRequest>('ControllerModifyVolume', {
    need: ['volumeId'],
    maps: ['mutableParameters'],
  }),
  controllerGetVolume: rules<T.ControllerGetVolumeRequest>('ControllerGetVolume', { need: ['volumeId'] }),
  nodeStageVolume: rules<T.NodeStageVolumeRequest>('NodeStageVolume', {
    need: ['volumeId', 'stagingTargetPath'],
    capability: 'volumeCapability',
    maps: ['volumeContext', 'publishContext'],
  }),
  nodeUnstageVolume: rules<T.NodeUnstageVolumeRequest>('NodeUnstageVolume', {
    need: ['volumeId', 'stagingTargetPath'],
  }),
  /** `staged`: the driver stages, so staging_target_path is required (else only checked). */
  nodePublishVolume: (r: T.NodePublishVolumeRequest, staged: boolean): void =>
    (staged ? nodePublishStaged : nodePublishUnstaged)(r),
  nodeUnpublishVolume: rules<T.NodeUnpublishVolumeRequest>('NodeUnpublishVolume', {
    need: ['volumeId', 'targetPath'],
  }),
  nodeGetVolumeStats: rules<T.NodeGetVolumeStatsRequest>('NodeGetVolumeStats', { need: ['volumeId', 'volumePath'] }),
  nodeExpandVolume: rules<T.NodeExpandVolumeRequest>('NodeExpandVolume', { need: ['volumeId', 'volumePath'] }),
};
