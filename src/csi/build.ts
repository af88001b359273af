// How a driver builds itself for the configured mode (each driver's driver.ts, re-exported from
// its index.ts; ceph-csi's NewDriver().Run): src/drivers.ts loops over the drivers and asks each
// whose endpoint is configured for its halves, its gauges and how to close it.
import type { Logger } from 'pino';
import type { AppConfig } from '../config/types.js';
import type { Exec } from '../os/exec.js';
import type { BackendHealth } from './health.js';
import type { GaugeSource } from './gauges.js';
import type { ControllerBackend, Driver, NodeBackend } from './types.js';

export interface BuildContext {
  config: AppConfig;
  /** Already bound to the driver's name. */
  log: Logger;
  /** Which halves this process serves (--mode). */
  controller: boolean;
  node: boolean;
  /** The node half's command runner, one for both drivers. */
  exec?: Exec | undefined;
}

export interface BuiltDriver {
  driver: Driver;
  /** Gauges for /metrics; empty when metrics are not served. */
  gauges: GaugeSource[];
  close(): Promise<void>;
}

export interface DriverBuilder<B extends BuiltDriver = BuiltDriver> {
  name: string;
  /** The endpoint this driver is served on, or undefined when the configuration leaves it out. */
  endpoint(config: AppConfig): string | undefined;
  build(ctx: BuildContext): Promise<B>;
}

/** A driver with whichever halves this process serves; both drivers expand online. */
export function driverOf(
  name: string,
  accessibilityConstraints: boolean,
  controller: (ControllerBackend & { health(signal: AbortSignal): Promise<BackendHealth[]> }) | undefined,
  node: NodeBackend | undefined,
): Driver {
  return {
    name,
    accessibilityConstraints,
    onlineExpansion: true,
    // Probe: this process serves. Backend health goes to metrics and logs (health.ts).
    probe: async () => true,
    ...(controller && { controller, health: (signal: AbortSignal) => controller.health(signal) }),
    ...(node && { node }),
  };
}
