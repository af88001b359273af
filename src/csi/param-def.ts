// How a driver describes one StorageClass parameter: its parser sits beside its schema, the
// chart's values.schema.json is generated from `schema` (scripts/gen-chart-schema.ts) and
// docs/parameters.md from `doc` and `schema` (scripts/gen-parameters-doc.ts). Shared by both
// drivers' param-keys.ts.
export type JsonSchema = Record<string, unknown>;

export interface ParamDef {
  /** What it does here (and where it differs from upstream). */
  doc: string;
  schema: JsonSchema;
  /** Its value as the driver uses it; throws INVALID_ARGUMENT naming the key for a bad value. */
  parse?: (value: string | undefined) => unknown;
}

/**
 * The boolean spellings of every boolean parameter and volume-context key of both drivers: the
 * ones Go's strconv.ParseBool accepts, which upstream StorageClasses were written for. The chart
 * schema's enums are generated from these lists too.
 */
export const BOOL_TRUE: readonly string[] = ['1', 't', 'T', 'true', 'TRUE', 'True'];
export const BOOL_FALSE: readonly string[] = ['0', 'f', 'F', 'false', 'FALSE', 'False'];

/** The boolean a spelling means, or undefined when it is not one of BOOL_TRUE / BOOL_FALSE. */
export function boolSpelling(v: string): boolean | undefined {
  if (BOOL_TRUE.includes(v)) return true;
  if (BOOL_FALSE.includes(v)) return false;
  return undefined;
}
