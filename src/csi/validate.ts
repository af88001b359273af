// Checks of required fields that the CSI spec defines for every driver alike; backends validate
// their own parameters. csi-sanity expects INVALID_ARGUMENT for each missing field.
import type * as T from './types.js';
import { parseCapacityRange } from './capacity.js';
import { InvalidArgument } from '../errors.js';

// NUL and the other C0/C1 control characters: no volume name, id, node id or path of either
// driver contains one, and passing them on would reach logs, handles and system calls.
// eslint-disable-next-line no-control-regex
const CONTROL_RE = /[\u0000-\u001f\u007f-\u009f]/;

/** Refuses a string field that holds a control character (one check for both drivers). */
export function noControlCharacters(value: unknown, name: string, method: string): void {
  if (typeof value !== 'string') return;
  const m = CONTROL_RE.exec(value);
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

export const validate = {
  createVolume(r: T.CreateVolumeRequest): void {
    need(r.name, 'name', 'CreateVolume');
    capabilities(r.volumeCapabilities, 'CreateVolume');
    noControlInMap(r.parameters, 'parameters', 'CreateVolume');
    noControlInMap(r.mutableParameters, 'mutable_parameters', 'CreateVolume');
    parseCapacityRange(r.capacityRange);
  },
  deleteVolume(r: T.DeleteVolumeRequest): void {
    need(r.volumeId, 'volume_id', 'DeleteVolume');
  },
  controllerPublishVolume(r: T.ControllerPublishVolumeRequest): void {
    need(r.volumeId, 'volume_id', 'ControllerPublishVolume');
    need(r.nodeId, 'node_id', 'ControllerPublishVolume');
    capability(r.volumeCapability, 'volume_capability', 'ControllerPublishVolume');
    noControlInMap(r.volumeContext, 'volume_context', 'ControllerPublishVolume');
  },
  controllerUnpublishVolume(r: T.ControllerUnpublishVolumeRequest): void {
    need(r.volumeId, 'volume_id', 'ControllerUnpublishVolume');
    noControlCharacters(r.nodeId, 'node_id', 'ControllerUnpublishVolume');
  },
  validateVolumeCapabilities(r: T.ValidateVolumeCapabilitiesRequest): void {
    need(r.volumeId, 'volume_id', 'ValidateVolumeCapabilities');
    capabilities(r.volumeCapabilities, 'ValidateVolumeCapabilities');
  },
  controllerExpandVolume(r: T.ControllerExpandVolumeRequest): void {
    need(r.volumeId, 'volume_id', 'ControllerExpandVolume');
    need(r.capacityRange, 'capacity_range', 'ControllerExpandVolume');
    parseCapacityRange(r.capacityRange);
  },
  controllerModifyVolume(r: T.ControllerModifyVolumeRequest): void {
    need(r.volumeId, 'volume_id', 'ControllerModifyVolume');
    noControlInMap(r.mutableParameters, 'mutable_parameters', 'ControllerModifyVolume');
  },
  controllerGetVolume(r: T.ControllerGetVolumeRequest): void {
    need(r.volumeId, 'volume_id', 'ControllerGetVolume');
  },
  nodeStageVolume(r: T.NodeStageVolumeRequest): void {
    need(r.volumeId, 'volume_id', 'NodeStageVolume');
    need(r.stagingTargetPath, 'staging_target_path', 'NodeStageVolume');
    capability(r.volumeCapability, 'volume_capability', 'NodeStageVolume');
    noControlInMap(r.volumeContext, 'volume_context', 'NodeStageVolume');
    noControlInMap(r.publishContext, 'publish_context', 'NodeStageVolume');
  },
  nodeUnstageVolume(r: T.NodeUnstageVolumeRequest): void {
    need(r.volumeId, 'volume_id', 'NodeUnstageVolume');
    need(r.stagingTargetPath, 'staging_target_path', 'NodeUnstageVolume');
  },
  nodePublishVolume(r: T.NodePublishVolumeRequest, staged: boolean): void {
    need(r.volumeId, 'volume_id', 'NodePublishVolume');
    need(r.targetPath, 'target_path', 'NodePublishVolume');
    if (staged) need(r.stagingTargetPath, 'staging_target_path', 'NodePublishVolume');
    else noControlCharacters(r.stagingTargetPath, 'staging_target_path', 'NodePublishVolume');
    capability(r.volumeCapability, 'volume_capability', 'NodePublishVolume');
    noControlInMap(r.volumeContext, 'volume_context', 'NodePublishVolume');
    noControlInMap(r.publishContext, 'publish_context', 'NodePublishVolume');
  },
  nodeUnpublishVolume(r: T.NodeUnpublishVolumeRequest): void {
    need(r.volumeId, 'volume_id', 'NodeUnpublishVolume');
    need(r.targetPath, 'target_path', 'NodeUnpublishVolume');
  },
  nodeGetVolumeStats(r: T.NodeGetVolumeStatsRequest): void {
    need(r.volumeId, 'volume_id', 'NodeGetVolumeStats');
    need(r.volumePath, 'volume_path', 'NodeGetVolumeStats');
  },
  nodeExpandVolume(r: T.NodeExpandVolumeRequest): void {
    need(r.volumeId, 'volume_id', 'NodeExpandVolume');
    need(r.volumePath, 'volume_path', 'NodeExpandVolume');
  },
};
