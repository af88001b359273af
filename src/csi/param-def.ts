// How a driver describes one StorageClass parameter: the driver parses it, and the chart's
// values.schema.json is generated from `schema` (scripts/gen-chart-schema.ts). Shared by both
// drivers' param-keys.ts.
export type JsonSchema = Record<string, unknown>;

export interface ParamDef {
  /** What it does here (and where it differs from upstream). */
  doc: string;
  schema: JsonSchema;
}
