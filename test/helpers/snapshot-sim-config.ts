// The simulator's default cluster with its API token given the base role's privileges plus what
// snapshots add (docs/proxmox-setup.md, exactly the roles src/proxmox/roles.ts defines): where
// every snapshot test, bench and chaos scenario starts. A fresh parse each call, so a caller
// may change it.
import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_CONFIG_PATH } from '../../sim/index.js';
import { BASE_ROLE, SNAPSHOT_ROLE } from '../../src/proxmox/index.js';

export const SNAPSHOT_TOKEN_PRIVILEGES = [...new Set([...BASE_ROLE.privileges, ...SNAPSHOT_ROLE.privileges])];

export interface SimYaml {
  tokens: Array<Record<string, unknown>>;
  nodes: Array<{ name: string; storages: Array<Record<string, unknown>>; vms: unknown[] }>;
}

export function snapshotSimConfig(): SimYaml {
  const config = parseYaml(fs.readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as SimYaml;
  const [token] = config.tokens;
  config.tokens[0] = { id: token?.id, secret: token?.secret, privileges: SNAPSHOT_TOKEN_PRIVILEGES };
  return config;
}
