// Writes the StorageClass parameter lists of charts/pve-nfs-csi/values.schema.json
// (`definitions.proxmoxParameters` and `definitions.nfsParameters`) from the drivers' own
// parameter definitions (src/proxmox/param-keys.ts, src/nfs/param-keys.ts), so the chart
// accepts exactly the keys the drivers accept. Only those two objects are rewritten; the rest of
// the file keeps its text. `--check` exits 1 when the file differs (test/helm/schema-params.test.ts).
//   npx tsx scripts/gen-chart-schema.ts [--check]
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PROXMOX_PARAMETERS } from '../src/proxmox/param-keys.js';
import type { ParamDef } from '../src/csi/param-def.js';
import { NFS_PARAMETERS } from '../src/nfs/param-keys.js';

export const SCHEMA_FILE = path.join(
  path.dirname(fileURLToPath(import.meta.url)),
  '..',
  'charts/pve-nfs-csi/values.schema.json',
);

/** Keys the provisioner itself consumes (secret names, fstype of other drivers): allowed in any class. */
const PROVISIONER_KEYS = { '^csi\\.storage\\.k8s\\.io/': { type: ['string', 'boolean', 'integer', 'number'] } };

function definition(description: string, defs: Record<string, ParamDef>): Record<string, unknown> {
  return {
    type: 'object',
    description,
    properties: Object.fromEntries(Object.entries(defs).map(([k, d]) => [k, { description: d.doc, ...d.schema }])),
    patternProperties: PROVISIONER_KEYS,
    additionalProperties: false,
  };
}

export function generatedDefinitions(): Record<string, Record<string, unknown>> {
  return {
    proxmoxParameters: definition(
      'StorageClass parameters of csi.proxmox.sinextra.dev (generated from src/proxmox/param-keys.ts); the driver rejects any other key',
      PROXMOX_PARAMETERS,
    ),
    nfsParameters: definition(
      'StorageClass parameters of nfs.csi.k8s.io (generated from src/nfs/param-keys.ts); the driver rejects any other key',
      NFS_PARAMETERS,
    ),
  };
}

/** JSON with arrays of scalars on one line, as the rest of the file is written. */
function render(v: unknown, indent: string): string {
  if (Array.isArray(v) && v.every((x) => x === null || typeof x !== 'object'))
    return `[${v.map((x) => JSON.stringify(x)).join(', ')}]`;
  if (Array.isArray(v)) return `[\n${v.map((x) => `${indent}  ${render(x, `${indent}  `)}`).join(',\n')}\n${indent}]`;
  if (v && typeof v === 'object') {
    const entries = Object.entries(v);
    if (entries.length === 0) return '{}';
    return `{\n${entries.map(([k, x]) => `${indent}  ${JSON.stringify(k)}: ${render(x, `${indent}  `)}`).join(',\n')}\n${indent}}`;
  }
  return JSON.stringify(v);
}

/** [start, end) of the object value of `"key": {` in JSON text, strings respected. */
function objectSpan(text: string, key: string): [number, number] {
  const at = text.indexOf(`${JSON.stringify(key)}: {`);
  if (at < 0) throw new Error(`${key} not found in the schema`);
  const start = text.indexOf('{', at);
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return [start, i + 1];
  }
  throw new Error(`unbalanced braces after ${key}`);
}

export function regenerate(text: string): string {
  let out = text;
  for (const [key, def] of Object.entries(generatedDefinitions())) {
    const [start, end] = objectSpan(out, key);
    const lineStart = out.lastIndexOf('\n', start) + 1;
    const indent = /^\s*/.exec(out.slice(lineStart))?.[0] ?? '';
    out = out.slice(0, start) + render(def, indent) + out.slice(end);
  }
  JSON.parse(out);
  return out;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const text = fs.readFileSync(SCHEMA_FILE, 'utf8');
  const next = regenerate(text);
  if (process.argv.includes('--check')) {
    if (next !== text) {
      process.stderr.write(`${SCHEMA_FILE} is out of date: run npx tsx scripts/gen-chart-schema.ts\n`);
      process.exit(1);
    }
  } else if (next !== text) {
    fs.writeFileSync(SCHEMA_FILE, next);
    process.stdout.write(`updated ${SCHEMA_FILE}\n`);
  }
}
