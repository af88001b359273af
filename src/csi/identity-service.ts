// The CSI Identity service of one driver: name, version, capabilities and Probe.
import type { IdentityHandlers } from '../gen/csi/v1/Identity.js';
import type { PluginCapability } from '../gen/csi/v1/PluginCapability.js';
import type { Driver } from './types.js';
import type { ServiceSpecs } from './service-spec.js';
import { timeoutSignal } from '../timeout-signal.js';

export interface IdentityInfo {
  version: string;
  /** Bounds Probe so a hung backend answers "not ready" instead of hanging the kubelet's probe. */
  probeTimeoutMs: number;
}

export function identityService(driver: Driver, info: IdentityInfo): ServiceSpecs<IdentityHandlers> {
  const caps: PluginCapability[] = [{ service: { type: 'CONTROLLER_SERVICE' } }];
  if (driver.accessibilityConstraints) caps.push({ service: { type: 'VOLUME_ACCESSIBILITY_CONSTRAINTS' } });
  if (driver.onlineExpansion) caps.push({ volumeExpansion: { type: 'ONLINE' } });
  return {
    GetPluginInfo: {
      impl: async () => ({ name: driver.name, vendorVersion: info.version }),
    },
    GetPluginCapabilities: {
      impl: async () => ({ capabilities: caps }),
    },
    Probe: {
      impl: async (_req, ctx) => {
        const deadline = timeoutSignal(info.probeTimeoutMs); // disarmed below (timeout-signal.ts)
        const signal = AbortSignal.any([ctx.signal, deadline.signal]);
        const timeout = new Promise<boolean>((resolve) =>
          signal.addEventListener('abort', () => resolve(false), { once: true }),
        );
        const ready = await Promise.race([driver.probe(signal).catch(() => false), timeout]).finally(deadline.clear);
        if (!ready) ctx.log.warn('backend did not answer the probe');
        return { ready: { value: ready } };
      },
    },
  };
}
