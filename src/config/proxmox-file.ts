// Reads the Proxmox config file in the upstream proxmox-csi-plugin Secret format
// (`clusters: [{url, insecure, token_id|token_id_file, token_secret|token_secret_file, region}]`,
// `features.controllerVmID`), plus our optional `ca_file`. Every problem names its key.
import fs from 'node:fs';
import { parse } from 'yaml';
import { ConfigError } from './errors.js';
import type { ProxmoxClusterConfig, ProxmoxConfig } from './types.js';

const CLUSTER_KEYS = new Set(['url', 'insecure', 'token_id', 'token_id_file', 'token_secret', 'token_secret_file', 'region', 'ca_file', 'username', 'password']);
const TOP_KEYS = new Set(['clusters', 'features']);
const FEATURE_KEYS = new Set(['controllerVmID', 'provider']);

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

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

function cluster(raw: unknown, i: number, file: string): ProxmoxClusterConfig {
  const where = `clusters[${i}]`;
  if (!isObj(raw)) throw new ConfigError(`${file}: ${where} must be a mapping`);
  for (const k of Object.keys(raw)) if (!CLUSTER_KEYS.has(k)) throw new ConfigError(`${file}: ${where}.${k} is not a known key`);
  if (raw.username !== undefined || raw.password !== undefined) {
    throw new ConfigError(`${file}: ${where}.username/password: only API tokens are supported; set token_id and token_secret`);
  }
  const url = str(raw, 'url', where, true)!;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(`${file}: ${where}.url "${url}" is not a URL`);
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') throw new ConfigError(`${file}: ${where}.url must be https://host:8006/api2/json`);
  const insecure = raw.insecure ?? false;
  if (typeof insecure !== 'boolean') throw new ConfigError(`${file}: ${where}.insecure must be true or false`);
  const idFile = str(raw, 'token_id_file', where, false);
  const secretFile = str(raw, 'token_secret_file', where, false);
  const tokenId = idFile ? readSecretFile(idFile, `${where}.token_id_file`) : str(raw, 'token_id', where, false);
  const tokenSecret = secretFile ? readSecretFile(secretFile, `${where}.token_secret_file`) : str(raw, 'token_secret', where, false);
  if (!tokenId) throw new ConfigError(`${file}: ${where}.token_id (or token_id_file) is required`);
  if (!tokenSecret) throw new ConfigError(`${file}: ${where}.token_secret (or token_secret_file) is required`);
  if (!/^[^@!\s]+@[^@!\s]+![^@!\s]+$/.test(tokenId)) throw new ConfigError(`${file}: ${where}.token_id must look like USER@REALM!TOKENID`);
  const region = str(raw, 'region', where, true)!;
  const caFile = str(raw, 'ca_file', where, false);
  if (caFile && !fs.existsSync(caFile)) throw new ConfigError(`${file}: ${where}.ca_file ${caFile} does not exist`);
  return { url, insecure, tokenId, tokenSecret, region, ...(caFile && { caFile }) };
}

export function parseProxmoxConfig(text: string, file: string): ProxmoxConfig {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (e) {
    throw new ConfigError(`${file}: not valid YAML: ${(e as Error).message.split('\n')[0]}`);
  }
  if (!isObj(doc)) throw new ConfigError(`${file}: expected a mapping with a "clusters" list`);
  for (const k of Object.keys(doc)) if (!TOP_KEYS.has(k)) throw new ConfigError(`${file}: ${k} is not a known key`);
  if (!Array.isArray(doc.clusters) || doc.clusters.length === 0) throw new ConfigError(`${file}: clusters must be a non-empty list`);
  const clusters = doc.clusters.map((c, i) => cluster(c, i, file));
  const regions = new Set<string>();
  for (const [i, c] of clusters.entries()) {
    if (regions.has(c.region)) throw new ConfigError(`${file}: clusters[${i}].region "${c.region}" is used twice`);
    regions.add(c.region);
  }
  let controllerVmId = 9999;
  if (doc.features !== undefined) {
    if (!isObj(doc.features)) throw new ConfigError(`${file}: features must be a mapping`);
    for (const k of Object.keys(doc.features)) if (!FEATURE_KEYS.has(k)) throw new ConfigError(`${file}: features.${k} is not a known key`);
    const id = doc.features.controllerVmID;
    if (id !== undefined) {
      const n = typeof id === 'string' ? Number(id) : id;
      if (typeof n !== 'number' || !Number.isInteger(n) || n < 100 || n > 999999999) {
        throw new ConfigError(`${file}: features.controllerVmID must be an integer VMID between 100 and 999999999`);
      }
      controllerVmId = n;
    }
  }
  return { clusters, controllerVmId };
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
