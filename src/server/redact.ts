// Produces a copy of a CSI message that is safe to log: every field the spec marks `csi_secret`
// is replaced, and so is anything in string maps or mount flags whose key looks like a credential
// (mount_flags "MAY contain sensitive information" per the spec; parameters sometimes carry tokens).
import type protobuf from 'protobufjs';
import { csiReflection } from './proto.js';

export const REDACTED = '[REDACTED]';
const SENSITIVE_KEY = /pass(word)?|secret|token|credential|private.?key|auth/i;

function redactFlag(flag: string): string {
  const eq = flag.indexOf('=');
  return eq > 0 && SENSITIVE_KEY.test(flag.slice(0, eq)) ? `${flag.slice(0, eq)}=${REDACTED}` : flag;
}

function redactMap(map: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(map)) out[k] = SENSITIVE_KEY.test(k) ? REDACTED : v;
  return out;
}

function redactMessage(type: protobuf.Type, value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  const src = value as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(src)) {
    const field = type.fields[key];
    if (!field) {
      out[key] = v;
      continue;
    }
    if (field.options?.['(csi_secret)'] === true) {
      out[key] =
        field.map && v && typeof v === 'object'
          ? Object.fromEntries(Object.keys(v).map((k) => [k, REDACTED]))
          : REDACTED;
    } else if (field.map && v && typeof v === 'object') {
      out[key] = redactMap(v as Record<string, unknown>);
    } else if (key === 'mountFlags' && Array.isArray(v)) {
      out[key] = v.map((f: unknown) => (typeof f === 'string' ? redactFlag(f) : f));
    } else if (field.resolvedType && 'fields' in field.resolvedType) {
      const sub = field.resolvedType;
      out[key] = Array.isArray(v) ? v.map((x) => redactMessage(sub, x)) : redactMessage(sub, v);
    } else {
      out[key] = v;
    }
  }
  return out;
}

/** typeName: the message's name inside package csi.v1, e.g. "CreateVolumeRequest". */
export function redact(typeName: string, value: unknown): unknown {
  const type = csiReflection().lookupType(`csi.v1.${typeName}`);
  return redactMessage(type, value);
}
