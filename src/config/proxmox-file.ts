// Reads the Proxmox config file in the upstream proxmox-csi-plugin v0.19.1 Secret format, as
// leniently as upstream does (gopkg.in/yaml.v3 into structs: unknown keys are ignored), so a
// Secret that ran upstream never crash-loops ours. Keys upstream reads, with its meaning:
//   clusters[].url, insecure, token_id | token_id_file, token_secret | token_secret_file,
//   username + password (ticket login), region; features.controllerVmID, features.provider.
// Ours on top: clusters[].ca_file. Unknown keys are warnings naming the key. Errors are kept for
// what upstream refuses too (missing/mixed credentials, no region, no http(s) url, VMID <= 100)
// and for what would break at the first call (bad YAML types, duplicate region).
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { ConfigError } from './errors.js';
import { scalarText } from './text.js';
import type { ProxmoxClusterConfig, ProxmoxConfig } from './types.js';

// The YAML parser (~20 ms to load) only when there is a Proxmox config file to read: an NFS-only
// or node process never loads it. require keeps readProxmoxConfig synchronous. In the image's
// bundle (scripts/bundle.ts) `require` exists and esbuild links this call to its own copy of yaml
// (initialised at the first call); compiled or under tsx, ESM has no `require`, so one is made.
const loadYaml = (): typeof import('yaml') =>
  typeof require === 'function'
    ? // eslint-disable-next-line @typescript-eslint/no-require-imports -- esbuild bundles only a call of the free `require`
      (require('yaml') as typeof import('yaml'))
    : (createRequire(import.meta.url)('yaml') as typeof import('yaml'));
const parse = (text: string): unknown => loadYaml().parse(text);

const CLUSTER_KEYS = new Set([
  'url',
  'insecure',
  'token_id',
  'token_id_file',
  'token_secret',
  'token_secret_file',
  'username',
  'password',
  'region',
  'ca_file',
  'expansion_helpers',
]);
const TOP_KEYS = new Set(['clusters', 'features']);
/** `controllerVMID` is the spelling of upstream's docs/config.md; its decoder ignores it (below). */
const FEATURE_KEYS = new Set(['controllerVmID', 'controllerVMID', 'provider']);
/** Upstream's default owner VMID and its lower bound (it refuses <= 100). */
export const DEFAULT_CONTROLLER_VMID = 9999;
const PROVIDERS = new Set(['default', 'capmox']);

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function str(o: Obj, key: string, where: string, required: true): string;
function str(o: Obj, key: string, where: string, required: boolean): string | undefined;
function str(o: Obj, key: string, where: string, required: boolean): string | undefined {
  const v = o[key];
  if (v === undefined || v === null || v === '') {
    if (required) throw new ConfigError(`${where}.${key} is required`);
    return undefined;
  }
  if (typeof v !== 'string') throw new ConfigError(`${where}.${key} must be a string`);
  return v;
}

function readSecretFile(file: string, key: string): string {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch (e) {
    throw new ConfigError(`${key}: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`);
  }
}

function unknownKeys(o: Obj, known: Set<string>, where: string, warnings: string[]): void {
  for (const k of Object.keys(o)) {
    if (!known.has(k))
      warnings.push(`${where}${k} is not a key proxmox-csi-plugin or this driver reads; ignored (check its spelling)`);
  }
}

function cluster(raw: unknown, i: number, file: string, warnings: string[]): ProxmoxClusterConfig {
  const where = `clusters[${i}]`;
  if (!isObj(raw)) throw new ConfigError(`${file}: ${where} must be a mapping`);
  unknownKeys(raw, CLUSTER_KEYS, `${file}: ${where}.`, warnings);
  const url = str(raw, 'url', where, true);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(`${file}: ${where}.url "${url}" is not a URL`);
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:')
    throw new ConfigError(`${file}: ${where}.url must be https://host:8006/api2/json`);
  const insecure = raw.insecure ?? false;
  if (typeof insecure !== 'boolean') throw new ConfigError(`${file}: ${where}.insecure must be true or false`);

  // Credentials exactly as upstream decides: a token (inline or file, not both of one half),
  // or username + password, never both kinds.
  for (const half of ['token_id', 'token_secret'] as const) {
    if (str(raw, half, where, false) && str(raw, `${half}_file`, where, false)) {
      throw new ConfigError(`${file}: ${where}: set ${half} or ${half}_file, not both`);
    }
  }
  const idFile = str(raw, 'token_id_file', where, false);
  const secretFile = str(raw, 'token_secret_file', where, false);
  const hasToken = Boolean(
    str(raw, 'token_id', where, false) || idFile || str(raw, 'token_secret', where, false) || secretFile,
  );
  const username = str(raw, 'username', where, false);
  const password = raw.password === undefined || raw.password === null ? undefined : scalarText(raw.password);
  if (hasToken && (username || password)) {
    throw new ConfigError(`${file}: ${where}: set either token_id/token_secret or username/password, not both`);
  }
  const region = str(raw, 'region', where, true);
  const caFile = str(raw, 'ca_file', where, false);
  if (caFile && !fs.existsSync(caFile)) throw new ConfigError(`${file}: ${where}.ca_file ${caFile} does not exist`);
  const helpers = raw.expansion_helpers;
  if (
    helpers !== undefined &&
    helpers !== null &&
    (!Array.isArray(helpers) || helpers.length === 0 || !helpers.every((h) => typeof h === 'string' && h.trim() !== ''))
  ) {
    throw new ConfigError(`${file}: ${where}.expansion_helpers must be a non-empty list of VM names`);
  }
  const common = {
    url,
    insecure,
    region,
    ...(caFile && { caFile }),
    ...(Array.isArray(helpers) && { expansionHelpers: (helpers as string[]).map((h) => h.trim()) }),
  };

  if (!hasToken) {
    // Without a token both halves of the user login are needed (and are strings from here on).
    if (!username || !password) {
      throw new ConfigError(
        `${file}: ${where}: credentials are required: token_id and token_secret (or their _file forms), or username and password`,
      );
    }
    if (!/^[^@\s]+@[^@!\s]+$/.test(username))
      throw new ConfigError(`${file}: ${where}.username must look like USER@REALM (e.g. root@pam)`);
    return { ...common, username, password };
  }
  const tokenId = idFile ? readSecretFile(idFile, `${where}.token_id_file`) : str(raw, 'token_id', where, false);
  const tokenSecret = secretFile
    ? readSecretFile(secretFile, `${where}.token_secret_file`)
    : str(raw, 'token_secret', where, false);
  if (!tokenId) throw new ConfigError(`${file}: ${where}.token_id (or token_id_file) is required`);
  if (!tokenSecret) throw new ConfigError(`${file}: ${where}.token_secret (or token_secret_file) is required`);
  if (!/^[^@!\s]+@[^@!\s]+![^@!\s]+$/.test(tokenId))
    throw new ConfigError(`${file}: ${where}.token_id must look like USER@REALM!TOKENID`);
  return { ...common, tokenId, tokenSecret };
}

function vmid(v: unknown, key: string, file: string): number {
  const n = typeof v === 'string' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n <= 100 || n > 999999999) {
    throw new ConfigError(
      `${file}: features.${key} must be an integer VMID above 100 (upstream's lower bound) and at most 999999999`,
    );
  }
  return n;
}

export function parseProxmoxConfig(text: string, file: string): ProxmoxConfig {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (e) {
    throw new ConfigError(`${file}: not valid YAML: ${(e as Error).message.split('\n')[0]}`);
  }
  if (!isObj(doc)) throw new ConfigError(`${file}: expected a mapping with a "clusters" list`);
  const warnings: string[] = [];
  unknownKeys(doc, TOP_KEYS, `${file}: `, warnings);
  if (!Array.isArray(doc.clusters) || doc.clusters.length === 0)
    throw new ConfigError(`${file}: clusters must be a non-empty list`);
  const clusters = doc.clusters.map((c, i) => cluster(c, i, file, warnings));
  const regions = new Set<string>();
  for (const [i, c] of clusters.entries()) {
    if (regions.has(c.region)) throw new ConfigError(`${file}: clusters[${i}].region "${c.region}" is used twice`);
    regions.add(c.region);
  }
  let controllerVmId = DEFAULT_CONTROLLER_VMID;
  let provider: 'default' | 'capmox' = 'default';
  if (doc.features !== undefined && doc.features !== null) {
    if (!isObj(doc.features)) throw new ConfigError(`${file}: features must be a mapping`);
    const f = doc.features;
    unknownKeys(f, FEATURE_KEYS, `${file}: features.`, warnings);
    if (f.controllerVmID !== undefined && f.controllerVmID !== null)
      controllerVmId = vmid(f.controllerVmID, 'controllerVmID', file);
    if (f.controllerVMID !== undefined && f.controllerVMID !== null) {
      // Upstream's docs spell controllerVMID, but yaml.v3 matches the struct tag `controllerVmID`
      // exactly, so upstream ignored this key and named disks vm-9999-…. Honouring a different
      // value here would make every existing vm-9999-… disk foreign to ListVolumes and
      // DeleteVolume, so we do what upstream did and say so.
      const asked = vmid(f.controllerVMID, 'controllerVMID', file);
      if (asked !== controllerVmId) {
        warnings.push(
          `${file}: features.controllerVMID (${asked}) is ignored, as proxmox-csi-plugin v0.19.1 ignored it (its YAML decoder only reads controllerVmID); ` +
            `disks keep the owner VMID ${controllerVmId}. To change it, write features.controllerVmID, knowing that existing disks keep their old prefix`,
        );
      }
    }
    if (f.provider !== undefined && f.provider !== null && f.provider !== '') {
      // Upstream compares with "capmox" only; any other value behaves as the default.
      if (typeof f.provider === 'string' && PROVIDERS.has(f.provider)) provider = f.provider as 'default' | 'capmox';
      else
        warnings.push(
          `${file}: features.provider "${scalarText(f.provider)}" is neither default nor capmox; treated as default, as upstream does`,
        );
    }
  }
  return { clusters, controllerVmId, provider, warnings };
}

export function readProxmoxConfig(file: string): ProxmoxConfig {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(`--proxmox-config: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`);
  }
  return parseProxmoxConfig(text, file);
}
