// Builds the Identity, Controller and Node service implementations of one driver from its
// backends; every method goes through the interceptor (src/server/interceptor.ts).
import type { IdentityHandlers } from '../gen/csi/v1/Identity.js';
import type { ControllerHandlers } from '../gen/csi/v1/Controller.js';
import type { NodeHandlers } from '../gen/csi/v1/Node.js';
import type { PluginCapability } from '../gen/csi/v1/PluginCapability.js';
import type { ControllerBackend, Driver, NodeBackend } from '../csi/types.js';
import { unary, type CallEnv } from './interceptor.js';
import { validate } from './validate.js';

export interface IdentityInfo {
  version: string;
  /** Bounds Probe so a hung backend answers "not ready" instead of hanging the kubelet's probe. */
  probeTimeoutMs: number;
}

export function identityService(env: CallEnv, driver: Driver, info: IdentityInfo): IdentityHandlers {
  const caps: PluginCapability[] = [{ service: { type: 'CONTROLLER_SERVICE' } }];
  if (driver.accessibilityConstraints) caps.push({ service: { type: 'VOLUME_ACCESSIBILITY_CONSTRAINTS' } });
  if (driver.onlineExpansion) caps.push({ volumeExpansion: { type: 'ONLINE' } });
  return {
    GetPluginInfo: unary(env, {
      method: 'GetPluginInfo',
      requestType: 'GetPluginInfoRequest',
      impl: async () => ({ name: driver.name, vendorVersion: info.version }),
    }),
    GetPluginCapabilities: unary(env, {
      method: 'GetPluginCapabilities',
      requestType: 'GetPluginCapabilitiesRequest',
      impl: async () => ({ capabilities: caps }),
    }),
    Probe: unary(env, {
      method: 'Probe',
      requestType: 'ProbeRequest',
      impl: async (_req, ctx) => {
        const signal = AbortSignal.any([ctx.signal, AbortSignal.timeout(info.probeTimeoutMs)]);
        const timeout = new Promise<boolean>((resolve) => signal.addEventListener('abort', () => resolve(false), { once: true }));
        const ready = await Promise.race([driver.probe(signal).catch(() => false), timeout]);
        if (!ready) ctx.log.warn('backend did not answer the probe');
        return { ready: { value: ready } };
      },
    }),
  };
}

const byVolume = (r: { volumeId: string }): string[] => [r.volumeId];

export function controllerService(env: CallEnv, c: ControllerBackend): ControllerHandlers {
  const has = (cap: string) => c.capabilities.includes(cap as never);
  const notAdvertised = () => undefined;
  return {
    CreateVolume: unary(env, {
      method: 'CreateVolume', requestType: 'CreateVolumeRequest',
      keys: (r) => [`name:${r.name}`], validate: validate.createVolume, impl: c.createVolume,
    }),
    DeleteVolume: unary(env, {
      method: 'DeleteVolume', requestType: 'DeleteVolumeRequest',
      keys: byVolume, validate: validate.deleteVolume, impl: c.deleteVolume,
    }),
    ControllerPublishVolume: unary(env, {
      method: 'ControllerPublishVolume', requestType: 'ControllerPublishVolumeRequest',
      keys: byVolume, validate: validate.controllerPublishVolume,
      impl: has('PUBLISH_UNPUBLISH_VOLUME') ? c.controllerPublishVolume : notAdvertised(),
    }),
    ControllerUnpublishVolume: unary(env, {
      method: 'ControllerUnpublishVolume', requestType: 'ControllerUnpublishVolumeRequest',
      keys: byVolume, validate: validate.controllerUnpublishVolume,
      impl: has('PUBLISH_UNPUBLISH_VOLUME') ? c.controllerUnpublishVolume : notAdvertised(),
    }),
    ValidateVolumeCapabilities: unary(env, {
      method: 'ValidateVolumeCapabilities', requestType: 'ValidateVolumeCapabilitiesRequest',
      validate: validate.validateVolumeCapabilities, impl: c.validateVolumeCapabilities,
    }),
    ListVolumes: unary(env, {
      method: 'ListVolumes', requestType: 'ListVolumesRequest',
      impl: has('LIST_VOLUMES') ? c.listVolumes : notAdvertised(),
    }),
    GetCapacity: unary(env, {
      method: 'GetCapacity', requestType: 'GetCapacityRequest',
      impl: has('GET_CAPACITY') ? c.getCapacity : notAdvertised(),
    }),
    ControllerGetCapabilities: unary(env, {
      method: 'ControllerGetCapabilities', requestType: 'ControllerGetCapabilitiesRequest',
      impl: async () => ({ capabilities: c.capabilities.map((type) => ({ rpc: { type } })) }),
    }),
    ControllerExpandVolume: unary(env, {
      method: 'ControllerExpandVolume', requestType: 'ControllerExpandVolumeRequest',
      keys: byVolume, validate: validate.controllerExpandVolume,
      impl: has('EXPAND_VOLUME') ? c.controllerExpandVolume : notAdvertised(),
    }),
    ControllerGetVolume: unary(env, {
      method: 'ControllerGetVolume', requestType: 'ControllerGetVolumeRequest',
      validate: validate.controllerGetVolume,
      impl: has('GET_VOLUME') ? c.controllerGetVolume : notAdvertised(),
    }),
    ControllerModifyVolume: unary(env, {
      method: 'ControllerModifyVolume', requestType: 'ControllerModifyVolumeRequest',
      keys: byVolume, validate: validate.controllerModifyVolume,
      impl: has('MODIFY_VOLUME') ? c.controllerModifyVolume : notAdvertised(),
    }),
    // Snapshots are not offered by either backend; they answer UNIMPLEMENTED.
    CreateSnapshot: unary(env, { method: 'CreateSnapshot', requestType: 'CreateSnapshotRequest', impl: undefined }),
    DeleteSnapshot: unary(env, { method: 'DeleteSnapshot', requestType: 'DeleteSnapshotRequest', impl: undefined }),
    ListSnapshots: unary(env, { method: 'ListSnapshots', requestType: 'ListSnapshotsRequest', impl: undefined }),
  };
}

export function nodeService(env: CallEnv, n: NodeBackend): NodeHandlers {
  const staged = n.capabilities.includes('STAGE_UNSTAGE_VOLUME');
  return {
    NodeStageVolume: unary(env, {
      method: 'NodeStageVolume', requestType: 'NodeStageVolumeRequest',
      keys: (r) => [`stage:${r.volumeId}`], validate: validate.nodeStageVolume,
      impl: staged ? n.nodeStageVolume : undefined,
    }),
    NodeUnstageVolume: unary(env, {
      method: 'NodeUnstageVolume', requestType: 'NodeUnstageVolumeRequest',
      keys: (r) => [`stage:${r.volumeId}`], validate: validate.nodeUnstageVolume,
      impl: staged ? n.nodeUnstageVolume : undefined,
    }),
    NodePublishVolume: unary(env, {
      method: 'NodePublishVolume', requestType: 'NodePublishVolumeRequest',
      keys: (r) => [`publish:${r.volumeId}:${r.targetPath}`], validate: (r) => validate.nodePublishVolume(r, staged),
      impl: n.nodePublishVolume,
    }),
    NodeUnpublishVolume: unary(env, {
      method: 'NodeUnpublishVolume', requestType: 'NodeUnpublishVolumeRequest',
      keys: (r) => [`publish:${r.volumeId}:${r.targetPath}`], validate: validate.nodeUnpublishVolume,
      impl: n.nodeUnpublishVolume,
    }),
    NodeGetVolumeStats: unary(env, {
      method: 'NodeGetVolumeStats', requestType: 'NodeGetVolumeStatsRequest',
      validate: validate.nodeGetVolumeStats,
      impl: n.capabilities.includes('GET_VOLUME_STATS') ? n.nodeGetVolumeStats : undefined,
    }),
    NodeExpandVolume: unary(env, {
      method: 'NodeExpandVolume', requestType: 'NodeExpandVolumeRequest',
      keys: (r) => [`stage:${r.volumeId}`], validate: validate.nodeExpandVolume,
      impl: n.capabilities.includes('EXPAND_VOLUME') ? n.nodeExpandVolume : undefined,
    }),
    NodeGetCapabilities: unary(env, {
      method: 'NodeGetCapabilities', requestType: 'NodeGetCapabilitiesRequest',
      impl: async () => ({ capabilities: n.capabilities.map((type) => ({ rpc: { type } })) }),
    }),
    NodeGetInfo: unary(env, {
      method: 'NodeGetInfo', requestType: 'NodeGetInfoRequest',
      impl: (_r, ctx) => n.nodeGetInfo(ctx),
    }),
  };
}
