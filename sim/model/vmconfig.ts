// VM config file semantics: serialisation (the digest is its SHA-1), the view with pending changes
// applied, the `GET …/pending` array, and `unusedN` bookkeeping, all as qemu-server does them.

import { createHash } from 'node:crypto';
import { isDriveKey, parseDrive, parseVolid, volumeOwner } from './drive.js';
import type { VmModel } from './types.js';
import { defined } from '../defined.js';

const INTEGER_KEYS = new Set(['cores', 'sockets', 'onboot', 'balloon', 'vcpus', 'protection']);

export function configText(vm: VmModel): string {
  let text = '';
  const desc = vm.config.get('description');
  if (desc !== undefined) for (const line of desc.split('\n')) text += `#${line}\n`;
  for (const k of [...vm.config.keys()].sort()) {
    if (k === 'description') continue;
    text += `${k}: ${vm.config.get(k)}\n`;
  }
  if (vm.pending.size > 0 || vm.pendingDelete.size > 0) {
    text += '\n[PENDING]\n';
    if (vm.pendingDelete.size > 0) {
      text += `delete: ${[...vm.pendingDelete].map(([k, force]) => (force ? `!${k}` : k)).join(',')}\n`;
    }
    for (const k of [...vm.pending.keys()].sort()) text += `${k}: ${vm.pending.get(k)}\n`;
  }
  // Snapshot sections follow, sorted by name (PVE::QemuServer write_vm_config).
  for (const name of [...vm.snapshots.keys()].sort()) {
    text += `\n[${name}]\n`;
    const keys = defined(vm.snapshots.get(name), `snapshot ${name}`);
    for (const k of [...keys.keys()].sort()) text += `${k}: ${keys.get(k)}\n`;
  }
  return text;
}

export function configDigest(vm: VmModel): string {
  return createHash('sha1').update(configText(vm)).digest('hex');
}

export function configFilePath(node: string, vmid: number): string {
  return `nodes/${node}/qemu-server/${vmid}.conf`;
}

function typed(key: string, value: string): string | number {
  return INTEGER_KEYS.has(key) && /^-?\d+$/.test(value) ? Number(value) : value;
}

/** GET …/config: pending values applied and pending deletes removed, unless `current`. */
export function configView(vm: VmModel, current: boolean): Record<string, string | number> {
  const merged = new Map(vm.config);
  if (!current) {
    for (const [k, v] of vm.pending) merged.set(k, v);
    for (const k of vm.pendingDelete.keys()) merged.delete(k);
  }
  const out: Record<string, string | number> = {};
  for (const [k, v] of [...merged].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) out[k] = typed(k, v);
  out.digest = configDigest(vm);
  return out;
}

export interface PendingItem {
  key: string;
  value?: string | number;
  pending?: string | number;
  delete?: number;
}

/** GET …/pending, in the shape of PVE::GuestHelpers::config_with_pending_array. */
export function pendingView(vm: VmModel): PendingItem[] {
  const res: PendingItem[] = [];
  const keys = [...vm.config.keys(), 'digest'].sort();
  for (const k of keys) {
    const item: PendingItem = { key: k };
    if (k === 'digest') item.value = configDigest(vm);
    else item.value = typed(k, defined(vm.config.get(k), `config key ${k}`));
    const p = vm.pending.get(k);
    if (p !== undefined) item.pending = typed(k, p);
    if (vm.pendingDelete.has(k)) item.delete = vm.pendingDelete.get(k) ? 2 : 1;
    res.push(item);
  }
  for (const [k, v] of vm.pending) {
    if (vm.config.has(k)) continue;
    res.push({ key: k, pending: typed(k, v) });
  }
  for (const [k, force] of vm.pendingDelete) {
    if (vm.pending.has(k) || vm.config.has(k)) continue;
    res.push({ key: k, delete: force ? 2 : 1 });
  }
  return res;
}

/** GET …/config?snapshot=NAME (PVE::AbstractConfig load_snapshot_config): the section and the file's digest. */
export function snapshotView(vm: VmModel, name: string): Record<string, string | number> {
  const section = vm.snapshots.get(name);
  if (!section) throw new Error(`snapshot '${name}' does not exist`);
  const out: Record<string, string | number> = {};
  for (const [k, v] of [...section].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) out[k] = typed(k, v);
  out.digest = configDigest(vm);
  return out;
}

/** GET …/snapshot (qemu-server snapshot_list): every snapshot, then `current`. */
export function snapshotList(vm: VmModel): Array<Record<string, string | number>> {
  const out: Array<Record<string, string | number>> = [];
  for (const [name, s] of vm.snapshots) {
    const item: Record<string, string | number> = {
      name,
      snaptime: Number(s.get('snaptime') ?? 0),
      vmstate: s.has('vmstate') ? 1 : 0,
      description: s.get('description') ?? '',
    };
    const parent = s.get('parent');
    if (parent) item.parent = parent;
    out.push(item);
  }
  const current: Record<string, string | number> = {
    name: 'current',
    digest: configDigest(vm),
    running: vm.status === 'running' ? 1 : 0,
    description: 'You are here!',
  };
  const parent = vm.config.get('parent');
  if (parent) current.parent = parent;
  out.push(current);
  return out;
}

/** Drops pending values equal to the current ones and deletes of keys that are not set. */
export function cleanupPending(vm: VmModel): void {
  for (const [k, v] of [...vm.pending]) if (vm.config.get(k) === v) vm.pending.delete(k);
  for (const k of [...vm.pendingDelete.keys()]) if (!vm.config.has(k)) vm.pendingDelete.delete(k);
}

/** Volume id of a drive value, if it is a storage volume (not a path, cdrom or none). */
export function driveVolid(key: string, value: string): string | undefined {
  if (!isDriveKey(key) && !/^unused\d+$/.test(key)) return undefined;
  const file = /^unused\d+$/.test(key) ? value : parseDrive(key, value).file;
  return parseVolid(file) ? file : undefined;
}

/** Adds `unusedN` for a volume this VM owns (vm_is_volid_owner); foreign volumes leave no trace. */
export function registerUnused(vm: VmModel, volid: string): void {
  const parsed = parseVolid(volid);
  if (!parsed || volumeOwner(parsed.volname) !== vm.vmid) return;
  for (const [k, v] of vm.config) if (/^unused\d+$/.test(k) && v === volid) return;
  for (let i = 0; i < 256; i++) {
    const key = `unused${i}`;
    if (!vm.config.has(key)) {
      vm.config.set(key, volid);
      return;
    }
  }
}

/**
 * True when some key other than `except` of the current config or pending section, or any key
 * of a snapshot section, uses the volume (PVE::QemuConfig is_volume_in_use with snapshots).
 */
export function volumeReferenced(vm: VmModel, volid: string, except?: string): boolean {
  for (const map of [vm.config, vm.pending, ...vm.snapshots.values()]) {
    for (const [k, v] of map) {
      if (k === except) continue;
      try {
        if (driveVolid(k, v) === volid) return true;
      } catch {
        // a value that no longer parses references nothing
      }
    }
  }
  return false;
}

/** Boot devices from `boot: order=a;b` (or legacy `bootdisk`), which PVE refuses to unplug. */
export function bootDevices(vm: VmModel): Set<string> {
  const boot = vm.config.get('boot');
  const order = boot ? /(?:^|,)order=([^,]+)/.exec(boot)?.[1] : undefined;
  if (order !== undefined) return new Set(order.split(';'));
  const legacy = vm.config.get('bootdisk');
  return new Set(legacy ? [legacy] : []);
}
