// The simulator's cluster file (YAML or an object): validated into SimConfig with messages that name
// the offending key, then turned into the initial ClusterState.

import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { normalizeDrive, parseDrive, parseVolid, volumeOwner } from './model/drive.js';
import { driveVolid } from './model/vmconfig.js';
import { parseHumanSize, roundUpToExtent } from './model/sizes.js';
import { ALWAYS_SHARED, defaultContent, defaultPlace } from './model/storage-types.js';
import { STORAGE_TYPES, type StorageType } from './model/types.js';
import { randomBytes } from 'node:crypto';
import type {
  ClusterState,
  NodeModel,
  StorageModel,
  TokenModel,
  UserModel,
  VersionInfo,
  VmModel,
} from './model/types.js';
import { type Faults, parseFaults } from './faults.js';
import { ALL_PRIVILEGES, BUILTIN_ROLES } from './model/privileges.js';

export const DEFAULT_CONFIG_PATH = join(dirname(fileURLToPath(import.meta.url)), 'default-cluster.yaml');

export interface StorageSpec {
  id: string;
  type: StorageType;
  shared: boolean;
  content: string;
  vgname: string;
  thinpool: string;
  size: number;
  used: number;
  overcommit: boolean;
}
export interface VmSpec {
  vmid: number;
  name: string;
  status: 'running' | 'stopped';
  config: Record<string, string>;
  /** The `[PENDING]` section's values (a change waiting for the VM to apply it). */
  pending: Record<string, string>;
  /** Snapshot sections by name: their keys as the config file has them. */
  snapshots: Record<string, Record<string, string>>;
}
export interface NodeSpec {
  name: string;
  maxcpu: number;
  maxmem: number;
  storages: StorageSpec[];
  vms: VmSpec[];
}
export interface TokenSpec {
  id: string;
  secret: string;
  privileges: string[];
}
export interface UserSpec {
  id: string;
  password: string;
  privileges: string[];
}

/** PVE::AccessControl `$ticket_lifetime`. */
export const TICKET_LIFETIME_SEC = 7200;

export interface SimConfig {
  cluster: string;
  version: VersionInfo;
  tokens: TokenSpec[];
  /** Password users for ticket login. */
  users: UserSpec[];
  ticketLifetimeSec: number;
  nodes: NodeSpec[];
  faults: Faults;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function str(o: Obj, key: string, where: string, dflt?: string): string {
  const v = o[key];
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== 'string' || v === '') throw new Error(`${where}.${key}: expected a non-empty string`);
  return v;
}
function int(o: Obj, key: string, where: string, dflt?: number): number {
  const v = o[key];
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw new Error(`${where}.${key}: expected an integer`);
  return v;
}
function list(o: Obj, key: string, where: string): unknown[] {
  const v = o[key] ?? [];
  if (!Array.isArray(v)) throw new Error(`${where}.${key}: expected a list`);
  return v;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const TOKEN_ID_RE = /^[^\s@!]+@[A-Za-z][A-Za-z0-9.\-_]+![A-Za-z][A-Za-z0-9.\-_]+$/;

function parseToken(raw: unknown, where: string, roles: Record<string, string[]>): TokenSpec {
  if (!isObj(raw)) throw new Error(`${where}: expected a mapping`);
  const id = str(raw, 'id', where);
  if (!TOKEN_ID_RE.test(id)) throw new Error(`${where}.id: '${id}' is not USER@REALM!TOKENID`);
  const secret = str(raw, 'secret', where);
  // proxmox-api refuses anything but a lowercase UUID, and real PVE secrets are exactly that
  if (!UUID_RE.test(secret)) throw new Error(`${where}.secret: must be a lowercase UUID like real PVE token secrets`);
  return { id, secret, privileges: privilegesOf(raw, where, roles) };
}

const USER_ID_RE = /^[^\s@!:]+@[A-Za-z][A-Za-z0-9.\-_]+$/;

function privilegesOf(raw: Obj, where: string, roles: Record<string, string[]>): string[] {
  let privileges: string[];
  if (raw.privileges !== undefined) {
    privileges = list(raw, 'privileges', where).map(String);
  } else {
    const role = str(raw, 'role', where, 'CSI');
    const r = roles[role];
    if (!r) throw new Error(`${where}.role: unknown role '${role}' (known: ${Object.keys(roles).join(', ')})`);
    privileges = r;
  }
  for (const p of privileges) {
    if (!ALL_PRIVILEGES.includes(p)) throw new Error(`${where}: unknown privilege '${p}'`);
  }
  return privileges;
}

function parseUser(raw: unknown, where: string, roles: Record<string, string[]>): UserSpec {
  if (!isObj(raw)) throw new Error(`${where}: expected a mapping`);
  const id = str(raw, 'id', where);
  if (!USER_ID_RE.test(id)) throw new Error(`${where}.id: '${id}' is not USER@REALM`);
  return { id, password: str(raw, 'password', where), privileges: privilegesOf(raw, where, roles) };
}

function parseStorage(raw: unknown, where: string): StorageSpec {
  if (!isObj(raw)) throw new Error(`${where}: expected a mapping`);
  const type = str(raw, 'type', where, 'lvmthin');
  if (!(STORAGE_TYPES as readonly string[]).includes(type))
    throw new Error(`${where}.type: '${type}' is not simulated (one of ${STORAGE_TYPES.join(', ')})`);
  const size = parseHumanSize((raw.size ?? '200G') as string | number, `${where}.size`);
  const used = parseHumanSize((raw.used ?? 0) as string | number, `${where}.used`);
  if (raw.shared !== undefined && typeof raw.shared !== 'boolean')
    throw new Error(`${where}.shared: expected a boolean`);
  const t = type as StorageType;
  return {
    id: str(raw, 'id', where),
    type: t,
    // PVE::Storage marks these types shared whatever storage.cfg says.
    shared: raw.shared === true || ALWAYS_SHARED.has(t),
    content: str(raw, 'content', where, defaultContent(t)),
    vgname: str(raw, 'vgname', where, defaultPlace(t)),
    thinpool: str(raw, 'thinpool', where, 'data'),
    size,
    used,
    overcommit: raw.overcommit === undefined ? true : raw.overcommit === true,
  };
}

function macFor(vmid: number): string {
  const hex = vmid.toString(16).padStart(6, '0').slice(-6).toUpperCase();
  return `BC:24:11:${hex.slice(0, 2)}:${hex.slice(2, 4)}:${hex.slice(4, 6)}`;
}

/** Drive values as qemu-server writes them (sizes in its notation), in place. */
function normalizeDrives(keys: Record<string, string>, where: string): void {
  for (const [k, v] of Object.entries(keys)) {
    if (!/^(scsi|virtio|sata|ide)\d+$/.test(k)) continue;
    try {
      keys[k] = normalizeDrive(k, v);
    } catch (e) {
      throw new Error(`${where}.${k}: ${(e as Error).message.replace(/\n/g, ' ').trim()}`, { cause: e });
    }
  }
}

function parseVm(raw: unknown, where: string): VmSpec {
  if (!isObj(raw)) throw new Error(`${where}: expected a mapping`);
  const vmid = int(raw, 'vmid', where);
  if (vmid < 100 || vmid > 999999999) throw new Error(`${where}.vmid: must be 100..999999999`);
  const name = str(raw, 'name', where);
  const status = str(raw, 'status', where, 'running');
  if (status !== 'running' && status !== 'stopped') throw new Error(`${where}.status: running or stopped`);
  const config: Record<string, string> = {
    boot: 'order=scsi0;net0',
    cores: String(int(raw, 'cores', where, 2)),
    cpu: 'host',
    memory: String(int(raw, 'memory', where, 4096)),
    name,
    net0: `virtio=${macFor(vmid)},bridge=vmbr0`,
    ostype: 'l26',
    scsihw: str(raw, 'scsihw', where, 'virtio-scsi-single'),
  };
  if (raw.uuid !== undefined) config.smbios1 = `uuid=${str(raw, 'uuid', where)}`;
  if (raw.bootDisk !== undefined) {
    if (!isObj(raw.bootDisk)) throw new Error(`${where}.bootDisk: expected {storage, size}`);
    const storage = str(raw.bootDisk, 'storage', `${where}.bootDisk`);
    const size = parseHumanSize((raw.bootDisk.size ?? '32G') as string | number, `${where}.bootDisk.size`);
    config.scsi0 = `${storage}:vm-${vmid}-disk-0,iothread=1,size=${size}`;
  }
  if (raw.config !== undefined) {
    if (!isObj(raw.config)) throw new Error(`${where}.config: expected a mapping of config keys`);
    for (const [k, v] of Object.entries(raw.config)) config[k] = String(v);
  }
  const keys = (field: string, m: unknown, at: string): Record<string, string> => {
    if (m === undefined) return {};
    if (!isObj(m)) throw new Error(`${at}.${field}: expected a mapping of config keys`);
    return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, String(v)]));
  };
  const pending = keys('pending', raw.pending, where);
  const snapshots: Record<string, Record<string, string>> = {};
  if (raw.snapshots !== undefined) {
    if (!isObj(raw.snapshots)) throw new Error(`${where}.snapshots: expected a mapping of snapshot name to keys`);
    for (const [name, s] of Object.entries(raw.snapshots)) {
      if (!/^[a-zA-Z][a-zA-Z0-9_-]+$/.test(name) || name.toLowerCase() === 'pending')
        throw new Error(`${where}.snapshots.${name}: not a snapshot name (pve-snapshot-name)`);
      snapshots[name] = keys(name, s, `${where}.snapshots`);
    }
  }
  normalizeDrives(config, `${where}.config`);
  normalizeDrives(pending, `${where}.pending`);
  for (const [n, keys] of Object.entries(snapshots)) normalizeDrives(keys, `${where}.snapshots.${n}`);
  return { vmid, name, status, config, pending, snapshots };
}

export function parseSimConfig(input: unknown): SimConfig {
  if (!isObj(input)) throw new Error('cluster config: expected a mapping at the top level');
  const roles = { ...BUILTIN_ROLES };
  if (input.roles !== undefined) {
    if (!isObj(input.roles)) throw new Error('roles: expected a mapping of role name to privilege list');
    for (const [name, privs] of Object.entries(input.roles)) {
      if (!Array.isArray(privs)) throw new Error(`roles.${name}: expected a list of privileges`);
      roles[name] = privs.map(String);
    }
  }
  const version = isObj(input.version) ? input.version : {};
  const nodes = list(input, 'nodes', 'cluster config').map((n, i) => {
    const where = `nodes[${i}]`;
    if (!isObj(n)) throw new Error(`${where}: expected a mapping`);
    return {
      name: str(n, 'name', where),
      maxcpu: int(n, 'maxcpu', where, 8),
      maxmem: parseHumanSize((n.maxmem ?? '64G') as string | number, `${where}.maxmem`),
      storages: list(n, 'storages', where).map((s, j) => parseStorage(s, `${where}.storages[${j}]`)),
      vms: list(n, 'vms', where).map((v, j) => parseVm(v, `${where}.vms[${j}]`)),
    };
  });
  if (nodes.length === 0) throw new Error('nodes: at least one node is required');
  const seen = new Set<number>();
  for (const n of nodes) {
    for (const vm of n.vms) {
      if (seen.has(vm.vmid)) throw new Error(`nodes: VMID ${vm.vmid} is defined twice`);
      seen.add(vm.vmid);
    }
  }
  const tokens = list(input, 'tokens', 'cluster config').map((t, i) => parseToken(t, `tokens[${i}]`, roles));
  if (tokens.length === 0) throw new Error('tokens: at least one API token is required');
  const users = list(input, 'users', 'cluster config').map((u, i) => parseUser(u, `users[${i}]`, roles));
  const ticketLifetimeSec = int(input, 'ticketLifetimeSeconds', 'cluster config', TICKET_LIFETIME_SEC);
  if (ticketLifetimeSec < 1) throw new Error('ticketLifetimeSeconds: must be at least 1');
  return {
    cluster: str(input, 'cluster', 'cluster config', 'homelab'),
    version: {
      // pve-manager 9.2.11 (the vendored sources): PVE::pvecfg::version_info, repoid = the
      // 16-digit short commit id
      version: str(version, 'version', 'version', '9.2.11'),
      release: str(version, 'release', 'version', '9.2'),
      repoid: str(version, 'repoid', 'version', '14a22df35955d97d'),
    },
    tokens,
    users,
    ticketLifetimeSec,
    nodes,
    faults: parseFaults(input.faults ?? {}, 'faults'),
  };
}

export function loadSimConfig(source?: string | object): SimConfig {
  if (source !== undefined && typeof source === 'object') return parseSimConfig(source);
  const path = source ?? DEFAULT_CONFIG_PATH;
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new Error(`cannot read cluster config '${path}': ${(e as Error).message}`, { cause: e });
  }
  try {
    return parseSimConfig(parseYaml(text));
  } catch (e) {
    throw new Error(`cluster config '${path}': ${(e as Error).message}`, { cause: e });
  }
}

/** Fresh state for a config; volumes referenced by drives are created so the config is consistent. */
export function buildCluster(cfg: SimConfig, nowSec: number): ClusterState {
  const nodes = new Map<string, NodeModel>();
  const vms = new Map<number, VmModel>();
  const sharedModels = new Map<string, StorageModel>();
  let pid = 2000;
  for (const ns of cfg.nodes) {
    const storages = new Map<string, StorageModel>();
    for (const s of ns.storages) {
      // A shared storage is one model: every node that lists it sees the same volumes.
      const same = s.shared ? sharedModels.get(s.id) : undefined;
      if (same) {
        storages.set(s.id, same);
        continue;
      }
      const model: StorageModel = {
        id: s.id,
        node: ns.name,
        type: s.type,
        shared: s.shared,
        vgname: s.vgname,
        thinpool: s.thinpool,
        totalBytes: s.size,
        baseUsedBytes: s.used,
        content: s.content,
        overcommit: s.overcommit,
        volumes: new Map(),
      };
      if (s.shared) sharedModels.set(s.id, model);
      storages.set(s.id, model);
    }
    nodes.set(ns.name, { name: ns.name, online: true, maxcpu: ns.maxcpu, maxmem: ns.maxmem, storages });
    for (const v of ns.vms) {
      const config = new Map(Object.entries(v.config));
      const snapshots = new Map(Object.entries(v.snapshots).map(([n, s]) => [n, new Map(Object.entries(s))]));
      // Every volume a key of the file names exists: the current config, pending, snapshots.
      const named = [config, new Map(Object.entries(v.pending)), ...snapshots.values()].flatMap((m) => [...m]);
      for (const [k, val] of named) {
        const file = driveVolid(k, val);
        const ref = file === undefined ? undefined : parseVolid(file);
        if (!ref || storages.get(ref.storage)?.volumes.has(ref.volname)) continue;
        const d = /^unused\d+$/.test(k) ? { opts: {} as Record<string, string> } : parseDrive(k, val);
        const st = storages.get(ref.storage);
        if (!st) throw new Error(`VM ${v.vmid} ${k}: storage '${ref.storage}' is not defined on node ${ns.name}`);
        const owner = volumeOwner(ref.volname);
        if (owner === undefined) throw new Error(`VM ${v.vmid} ${k}: volume name '${ref.volname}' is not vm-<vmid>-…`);
        const size = roundUpToExtent(Number(d.opts.size ?? 32 * 1024 ** 3));
        st.volumes.set(ref.volname, {
          node: ns.name,
          storage: st.id,
          volname: ref.volname,
          ownerVmid: owner,
          sizeBytes: size,
          format: 'raw',
          ctime: nowSec,
        });
      }
      vms.set(v.vmid, {
        vmid: v.vmid,
        node: ns.name,
        status: v.status,
        config,
        pending: new Map(Object.entries(v.pending)),
        pendingDelete: new Map(),
        snapshots,
        startedAt: nowSec - 3600,
        pid: pid++,
      });
    }
  }
  const tokens = new Map<string, TokenModel>();
  for (const t of cfg.tokens) tokens.set(t.id, { id: t.id, secret: t.secret, privileges: new Set(t.privileges) });
  const users = new Map<string, UserModel>();
  for (const u of cfg.users) users.set(u.id, { id: u.id, password: u.password, privileges: new Set(u.privileges) });
  return {
    name: cfg.cluster,
    version: cfg.version,
    nodes,
    vms,
    tokens,
    users,
    authKey: randomBytes(32),
    ticketLifetimeSec: cfg.ticketLifetimeSec,
  };
}
