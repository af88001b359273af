// The simulator's default cluster with its API token given the CSI role's privileges plus what
// snapshots add (docs/snapshots.md, "Privileges"): where every snapshot test, bench and chaos
// scenario starts. A fresh parse each call, so a caller may change it.
import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_CONFIG_PATH } from '../../sim/index.js';

export const SNAPSHOT_TOKEN_PRIVILEGES = [
  'VM.Audit',
  'VM.Config.Disk',
  'Datastore.Allocate',
  'Datastore.AllocateSpace',
  'Datastore.Audit',
  'VM.Allocate',
  'VM.Snapshot',
  'VM.Clone',
  'VM.Migrate',
];

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
