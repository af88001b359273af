// Gauges a backend or a background collector exports, in a shape that needs no metrics library:
// the definitions are static (so the registry knows every name before the first scrape, and the
// dashboard test reads them from the real registry), the values are a snapshot kept by whoever
// refreshes them. src/server/metrics.ts turns a source into Prometheus gauges (addGauges). Here,
// below the drivers, so a driver hands its gauges up without importing src/metrics.

export interface GaugeDef {
  name: string;
  help: string;
  labelNames: readonly string[];
}

export interface GaugeSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface GaugeSource {
  readonly defs: readonly GaugeDef[];
  /** The values as last refreshed; read at every scrape, so it does no I/O. */
  snapshot(): readonly GaugeSample[];
}
