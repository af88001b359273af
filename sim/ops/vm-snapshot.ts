// VM snapshots (pve-guest-common AbstractConfig snapshot_create / snapshot_delete with
// qemu-server QemuConfig's hooks), for disk-only snapshots (no vmstate):
// - prepare under the config lock: not a template, no lock, name unused, the `snapshot` feature
//   on every drive that is not a CD-ROM (`backup=0` drives included), any `parent` reference to
//   the new name dropped; the section copies the config (not unusedN, lock, description,
//   snapshot keys) with `snapstate: prepare` and `snaptime`; the config gets `lock: snapshot`;
// - every drive's volume snapshot (storage level: `snap_<vol>_<name>`), running VM or not;
// - commit: `snapstate` and the lock dropped, `parent` set to the new name. A failure deletes
//   what was made (snapshot_delete with force and the drives done so far).
// Deleting: `lock: snapshot-delete`, `snapstate: delete`, each drive's volume snapshot removed
// and the drive dropped from the section, then the section removed, `parent` references
// re-pointed to its parent, and every volume it used added as unusedN (add_unused_volume:
// whoever owns it) — a VM left holding a disk it does not own this way never frees it.

import { fail } from '../http/errors.js';
import { isCdrom, isDriveKey, parseDrive, parseVolid } from '../model/drive.js';
import type { VmModel } from '../model/types.js';
import type { TaskLog } from '../tasks.js';
import { type SimContext, findVolume, withVmLock } from './context.js';
import { deleteVolumeSnapshot, snapshotVolume } from './thin-snapshot.js';

const SECTION_SKIP = new Set(['snapstate', 'snaptime', 'vmstate', 'lock', 'digest', 'description', 'parent']);

/** The drive keys of a config or section with a storage volume, CD-ROMs left out (foreach_volume). */
export function volumeDrives(keys: Map<string, string>): Array<{ key: string; volid: string }> {
  const out: Array<{ key: string; volid: string }> = [];
  for (const [k, v] of keys) {
    if (!isDriveKey(k)) continue;
    const drive = parseDrive(k, v);
    if (isCdrom(drive)) continue;
    out.push({ key: k, volid: drive.file });
  }
  return out;
}

function checkLock(vm: VmModel): void {
  const lock = vm.config.get('lock');
  if (lock) throw fail(`VM is locked (${lock})`);
}

/** LvmThinPlugin volume_has_feature('snapshot'): a `current` volume of an existing LV. */
function assertSnapshotFeature(ctx: SimContext, vm: VmModel): void {
  for (const { volid } of volumeDrives(vm.config)) {
    const ref = parseVolid(volid);
    if (!ref || !findVolume(ctx, vm.node, volid) || ref.volname.startsWith('base-'))
      throw fail('snapshot feature is not available');
  }
}

function prepare(ctx: SimContext, vm: VmModel, name: string, description: string | undefined): Map<string, string> {
  if (vm.config.get('template') === '1') throw fail("you can't take a snapshot if it's a template");
  checkLock(vm);
  if (vm.snapshots.has(name)) throw fail(`snapshot name '${name}' already used`);
  assertSnapshotFeature(ctx, vm);
  for (const s of vm.snapshots.values()) if (s.get('parent') === name) s.delete('parent');
  const section = new Map<string, string>();
  for (const [k, v] of vm.config) {
    if (SECTION_SKIP.has(k) || /^unused\d+$/.test(k)) continue;
    section.set(k, v);
  }
  const parent = vm.config.get('parent');
  if (parent) section.set('parent', parent);
  section.set('snapstate', 'prepare');
  section.set('snaptime', String(ctx.nowSec()));
  if (description) section.set('description', description);
  vm.snapshots.set(name, section);
  vm.config.set('lock', 'snapshot');
  return section;
}

/** The qmsnapshot worker. */
export async function snapshotCreate(
  ctx: SimContext,
  vm: VmModel,
  name: string,
  description: string | undefined,
  log: TaskLog,
): Promise<void> {
  const section = await withVmLock(ctx, vm, () => Promise.resolve(prepare(ctx, vm, name, description)));
  const done = new Set<string>();
  try {
    for (const { key, volid } of volumeDrives(section)) {
      log.print(`snapshotting 'drive-${key}' (${volid})`);
      const ref = parseVolid(volid);
      if (!ref) throw fail(`unable to parse volume ID '${volid}'`);
      await snapshotVolume(ctx, vm.node, ref.storage, ref.volname, name, log);
      done.add(key);
    }
  } catch (e) {
    log.warn('snapshot create failed: starting cleanup');
    try {
      await snapshotDelete(ctx, vm, name, true, log, done);
    } catch (cleanup) {
      log.warn((cleanup as Error).message);
    }
    throw e;
  }
  await withVmLock(ctx, vm, () => {
    if (vm.config.get('lock') !== 'snapshot') throw fail('missing snapshot lock');
    const s = vm.snapshots.get(name);
    if (!s) throw fail(`snapshot '${name}' does not exist`);
    if (s.get('snapstate') !== 'prepare') throw fail('wrong snapshot state');
    s.delete('snapstate');
    vm.config.delete('lock');
    vm.config.set('parent', name);
    return Promise.resolve();
  });
}

/** AbstractConfig add_unused_volume: the first free unusedN, no duplicate, no owner check. */
function addUnusedVolume(vm: VmModel, volid: string): void {
  let free: string | undefined;
  for (let i = 255; i >= 0; i--) {
    const v = vm.config.get(`unused${i}`);
    if (v === volid) return;
    if (v === undefined) free = `unused${i}`;
  }
  if (!free) throw fail('Too many unused volumes - please delete them first.');
  vm.config.set(free, volid);
}

/**
 * The qmdelsnapshot worker (and create's cleanup, which passes the drives it snapshotted and
 * keeps the `snapshot` lock it holds). `force` goes on past a failed volume snapshot delete.
 */
export async function snapshotDelete(
  ctx: SimContext,
  vm: VmModel,
  name: string,
  force: boolean,
  log: TaskLog,
  drives?: Set<string>,
): Promise<void> {
  const expected = drives ? 'snapshot' : 'snapshot-delete';
  if (!vm.snapshots.has(name)) throw fail(`snapshot '${name}' does not exist`);
  const section = await withVmLock(ctx, vm, () => {
    if (!drives) {
      checkLock(vm);
      vm.config.set('lock', expected);
    }
    if (vm.config.get('template') === '1') throw fail("you can't delete a snapshot if vm is a template");
    const s = vm.snapshots.get(name);
    if (!s) throw fail(`snapshot '${name}' does not exist`);
    s.set('snapstate', 'delete');
    return Promise.resolve(s);
  });
  const unused: string[] = [];
  for (const { key, volid } of volumeDrives(section)) {
    if (drives && !drives.has(key)) continue;
    const ref = parseVolid(volid);
    try {
      if (!ref) throw fail(`unable to parse volume ID '${volid}'`);
      await deleteVolumeSnapshot(ctx, vm.node, ref.storage, ref.volname, name, log);
    } catch (e) {
      if (!force) throw e;
      log.warn((e as Error).message);
    }
    unused.push(volid);
    if (!force) section.delete(key);
  }
  await withVmLock(ctx, vm, () => {
    if (vm.config.get('lock') !== expected) throw fail(`encountered invalid lock, expected '${expected}'`);
    const parent = vm.snapshots.get(name)?.get('parent');
    for (const keys of [vm.config, ...vm.snapshots.values()]) {
      if (keys.get('parent') !== name) continue;
      if (parent) keys.set('parent', parent);
      else keys.delete('parent');
    }
    vm.snapshots.delete(name);
    vm.config.delete('lock');
    for (const volid of unused) addUnusedVolume(vm, volid);
    return Promise.resolve();
  });
}
