// Parameter schemas checked like PVE::JSONSchema::validate, with its error texts, so a bad request
// gets the same 400 `errors: {param: message}` a real host would send.

import { paramError } from './errors.js';

export type ParamSpec =
  | {
      type: 'string';
      optional?: boolean;
      pattern?: RegExp;
      enum?: string[];
      maxLength?: number;
      format?: 'pve-node' | 'pve-storage-id' | 'pve-configid' | 'pve-configid-list';
    }
  | { type: 'integer'; optional?: boolean; minimum?: number; maximum?: number }
  | { type: 'boolean'; optional?: boolean };

export interface RouteSchema {
  properties: Record<string, ParamSpec>;
  /** For schemas with open-ended keys (VM options): returns an error text, or undefined to accept. */
  extra?: (key: string, value: string) => string | undefined;
}

export const NODE: ParamSpec = { type: 'string', format: 'pve-node' };
export const VMID: ParamSpec = { type: 'integer', minimum: 100, maximum: 999_999_999 };
export const STORAGE: ParamSpec = { type: 'string', format: 'pve-storage-id' };

const NODE_RE = /^(?=.{1,63}$)[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$/;
const STORAGE_RE = /^[a-z][a-z0-9\-_.]*[a-z0-9]$/i;
// PVE::JSONSchema $CONFIGID_RE
const CONFIGID_RE = /^[a-z][a-z0-9_-]+$/i;

/** PVE::Tools::split_list: separators are `,`, `;`, spaces and NULs. */
export function splitList(value: string): string[] {
  return value.split(/[,;\s\0]+/).filter((s) => s !== '');
}

function checkOne(spec: ParamSpec, value: string): { error?: string; value: string } {
  switch (spec.type) {
    case 'integer': {
      if (!/^-?\d+$/.test(value)) return { error: `type check ('integer') failed - got '${value}'`, value };
      const n = Number(value);
      if (spec.minimum !== undefined && n < spec.minimum)
        return { error: `value must have a minimum value of ${spec.minimum}`, value };
      if (spec.maximum !== undefined && n > spec.maximum)
        return { error: `value may have a maximum value of ${spec.maximum}`, value };
      return { value: String(n) };
    }
    case 'boolean': {
      if (/^(1|true|yes|on)$/i.test(value)) return { value: '1' };
      if (/^(0|false|no|off)$/i.test(value)) return { value: '0' };
      return { error: `type check ('boolean') failed - got '${value}'`, value };
    }
    case 'string': {
      if (spec.maxLength !== undefined && value.length > spec.maxLength) {
        return { error: `value may only be ${spec.maxLength} characters long`, value };
      }
      if (spec.enum && !spec.enum.includes(value)) {
        return { error: `value '${value}' does not have a value in the enumeration '${spec.enum.join(', ')}'`, value };
      }
      if (spec.pattern && !new RegExp(`^(?:${spec.pattern.source})$`).test(value)) {
        return { error: 'value does not match the regex pattern', value };
      }
      if (spec.format === 'pve-node' && !NODE_RE.test(value))
        return { error: 'value does not look like a valid node name', value };
      if (spec.format === 'pve-storage-id' && !STORAGE_RE.test(value)) {
        return { error: `storage ID '${value}' contains illegal characters`, value };
      }
      if (spec.format === 'pve-configid' && !CONFIGID_RE.test(value))
        return { error: `invalid format - invalid configuration ID '${value}'\n`, value };
      if (spec.format === 'pve-configid-list') {
        for (const id of splitList(value)) {
          if (!CONFIGID_RE.test(id)) return { error: `invalid format - invalid configuration ID '${id}'\n`, value };
        }
      }
      return { value };
    }
  }
}

/** Validates merged query/body/path parameters; throws a 400 ApiError listing every problem. */
export function validateParams(schema: RouteSchema, raw: Record<string, string>): Record<string, string> {
  const errors: Record<string, string> = {};
  const out: Record<string, string> = {};
  for (const [key, spec] of Object.entries(schema.properties)) {
    const value = raw[key];
    if (value === undefined) {
      if (!spec.optional) errors[key] = 'property is missing and it is not optional';
      continue;
    }
    const r = checkOne(spec, value);
    if (r.error) errors[key] = r.error;
    else out[key] = r.value;
  }
  for (const [key, value] of Object.entries(raw)) {
    if (key in schema.properties) continue;
    const err = schema.extra
      ? schema.extra(key, value)
      : 'property is not defined in schema and the schema does not allow additional properties';
    if (err) errors[key] = err;
    else out[key] = value;
  }
  if (Object.keys(errors).length > 0) throw paramError(errors);
  return out;
}
