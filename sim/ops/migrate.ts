// Offline migration of a stopped VM with its local disks (qemu-server PVE::QemuMigrate under
// pve-guest-common's AbstractMigrate::migrate), the only way Proxmox VE offers a non-root user
// to copy a local LVM-thin volume to another node of the cluster:
// - guest_migration_lock (`pve-migrate-<vmid>`), then the VM config lock for the whole run;
// - prepare: the config must exist on the source, carry no lock, and the VM must be stopped;
// - phase1: `lock: migrate` written to the config, every volume the config references (current,
//   pending, unusedN, snapshot sections) scanned — it must exist, its target storage must exist
//   on the target node, the VM must own it (`owned by other VM (owner = VM n)`), and no snapshot
//   section may reference it (LVM-thin raw: `non-migratable snapshot exists`) — then copied with
//   storage_migrate (pvesm export | pvesm import, raw+size): the target name is the source name,
//   or a free `vm-<vmid>-disk-N` when that name exists on the target (allow_rename);
//   a failure frees what was copied and leaves the VM on the source (`migration aborted`);
// - phase3_cleanup: volids in the config mapped to the new names, the config moved to the target
//   node, the source copies freed (a failure there is logged and ends the task with
//   `migration problems`, the VM already on the target), the lock cleared.
// Log lines carry AbstractMigrate's `YYYY-MM-DD HH:MM:SS ` prefix (`ERROR: ` for errors).

import { fail } from '../http/errors.js';
import { lockKey } from '../locks.js';
import { parseVolid, volumeOwner } from '../model/drive.js';
import type { VmModel, VolumeModel } from '../model/types.js';
import { driveVolid } from '../model/vmconfig.js';
import type { TaskLog } from '../tasks.js';
import { type SimContext, findVolume, getNode, getStorage, loadVm, withStorageLock, withVmLock } from './context.js';
import { freeVolume } from './storage.js';

/** parse_idmap of `targetstorage`: `1` = identity, `sid` = default, `src:dst,…` = entries. */
export interface StorageMap {
  identity: boolean;
  default?: string;
  entries: Record<string, string>;
}

export interface MigrateRequest {
  node: string;
  vmid: number;
  target: string;
  online: boolean;
  storagemap?: StorageMap;
}

export const migrateLockFile = (vmid: number) => `/var/lock/pve-manager/pve-migrate-${vmid}`;

/** A stand-in for the target's migration address (documentation range, never dialled). */
export function nodeIp(ctx: SimContext, node: string): string {
  return `192.0.2.${[...ctx.state.nodes.keys()].indexOf(node) + 1}`;
}

export function mapStorage(map: StorageMap | undefined, sid: string): string {
  if (!map || map.identity) return sid;
  return map.entries[sid] ?? map.default ?? sid;
}

type Ref = 'attached' | 'unused' | 'pending';

const volidOf = (k: string, v: string): string | undefined => {
  try {
    return driveVolid(k, v);
  } catch {
    return undefined;
  }
};

/** Volumes a snapshot section references (foreach_volid's `referenced_in_snapshot`). */
export function snapshotVolumes(vm: VmModel): Set<string> {
  const out = new Set<string>();
  for (const section of vm.snapshots.values())
    for (const [k, v] of section) {
      const volid = volidOf(k, v);
      if (volid) out.add(volid);
    }
  return out;
}

/** Volumes the config references (PVE::QemuServer::foreach_volid), with how. */
export function referencedVolumes(vm: VmModel): Map<string, Ref> {
  const out = new Map<string, Ref>();
  for (const [map, pending] of [
    [vm.config, false],
    [vm.pending, true],
  ] as const) {
    for (const [k, v] of map) {
      const volid = volidOf(k, v);
      if (!volid) continue;
      const ref: Ref = pending ? 'pending' : /^unused\d+$/.test(k) ? 'unused' : 'attached';
      if (!out.has(volid) || ref === 'attached') out.set(volid, ref);
    }
  }
  return out;
}

function duration(startMs: number): string {
  const s = Math.floor((Date.now() - startMs) / 1000);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${p(Math.floor(s / 3600))}:${p(Math.floor(s / 60) % 60)}:${p(s % 60)}`;
}

function stamp(): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

const errText = (e: unknown) => (e instanceof Error ? e.message : String(e)).replace(/\n+$/, '');

class Migration {
  private readonly volumeMap = new Map<string, string>();
  private local = new Map<string, { ref: Ref; vol: VolumeModel; targetsid: string }>();
  errors = false;

  constructor(
    private readonly ctx: SimContext,
    private readonly req: MigrateRequest,
    private readonly out: TaskLog,
  ) {}

  log(msg: string, level: 'info' | 'warn' | 'err' = 'info'): void {
    const prefix = level === 'err' ? `${stamp()} ERROR:` : stamp();
    for (const line of msg.replace(/\n+$/, '').split('\n')) this.out.print(`${prefix} ${line}`);
  }

  prepare(vm: VmModel): void {
    const lock = vm.config.get('lock');
    if (lock) throw fail(`VM is locked (${lock})`);
    if (vm.status === 'running') {
      if (!this.req.online) throw fail("can't migrate running VM without --online");
      throw fail('live migration is not modelled by the simulator');
    }
  }

  private scan(vm: VmModel): void {
    const { ctx, req } = this;
    const errors = new Map<string, string>();
    const inSnapshots = snapshotVolumes(vm);
    const scanned = referencedVolumes(vm);
    // Only in a snapshot section: scanned as well (foreach_volid walks the sections), and refused.
    for (const volid of inSnapshots) if (!scanned.has(volid)) scanned.set(volid, 'unused');
    for (const [volid, ref] of scanned) {
      try {
        const parsed = parseVolid(volid);
        if (!parsed) continue;
        const { storage: sid, volname } = parsed;
        getStorage(ctx, req.node, sid);
        const targetsid = mapStorage(req.storagemap, sid);
        getStorage(ctx, req.target, targetsid);
        const vol = findVolume(ctx, req.node, volid);
        if (!vol) throw fail(`unable to determine size for volume '${volid}'`);
        const owner = volumeOwner(volname);
        if (owner === undefined || owner !== vm.vmid) throw fail(`owned by other VM (owner = VM ${owner ?? 0})`);
        // QemuMigrate: snapshots migrate only on zfspool, raw btrfs or in-qcow2; LVM-thin is none.
        if (inSnapshots.has(volid)) throw fail('non-migratable snapshot exists');
        this.local.set(volid, { ref, vol, targetsid });
      } catch (e) {
        errors.set(volid, errText(e));
      }
    }
    for (const [volid, { ref }] of [...this.local].sort(([a], [b]) => a.localeCompare(b))) {
      this.log(
        `found local disk '${volid}'${ref === 'attached' ? ' (attached)' : ref === 'unused' ? ' (unused)' : ' (pending change)'}`,
      );
    }
    for (const [volid, msg] of [...errors].sort(([a], [b]) => a.localeCompare(b))) {
      this.log(`can't migrate local disk '${volid}': ${msg}`, 'warn');
    }
    if (errors.size > 0) throw fail("Problem found while scanning volumes - can't migrate VM - check log");
  }

  /** PVE::Storage::storage_migrate for one volume: returns the volid on the target. */
  private async copyVolume(volid: string, vol: VolumeModel, targetsid: string): Promise<string> {
    const { ctx, req } = this;
    const st = getStorage(ctx, req.target, targetsid);
    const target = `${targetsid}:${vol.volname}`;
    const files = ctx.backend.files;
    const copy: VolumeModel = await withStorageLock(ctx, req.target, targetsid, () => {
      let volname = vol.volname;
      if (st.volumes.has(volname)) {
        this.log(`volume ${st.vgname}/${volname} already exists - importing with a different name`);
        for (let i = 0; ; i++) {
          volname = `vm-${vol.ownerVmid}-disk-${i}`;
          if (!st.volumes.has(volname)) break;
        }
      }
      const v: VolumeModel = {
        node: req.target,
        storage: targetsid,
        volname,
        ownerVmid: vol.ownerVmid,
        sizeBytes: vol.sizeBytes,
        format: 'raw',
        ctime: ctx.nowSec(),
      };
      if (files) v.filePath = files.pathFor(req.target, targetsid, volname);
      st.volumes.set(volname, v);
      return Promise.resolve(v);
    });
    const failCopy = ctx.faults.get().migrateFail === 'copy';
    try {
      if (files && vol.filePath && copy.filePath) {
        await files.copy(
          vol.filePath,
          copy.filePath,
          vol.sizeBytes,
          failCopy ? Math.floor(vol.sizeBytes / 2) : undefined,
        );
      } else if (files && copy.filePath) {
        await files.create(copy.filePath, vol.sizeBytes);
      }
      if (failCopy) throw new Error('broken pipe');
    } catch {
      // volume_import frees what it allocated before passing the error on
      await freeVolume(ctx, req.target, targetsid, copy.volname);
      const ip = nodeIp(ctx, req.target);
      throw fail(
        `storage migration for '${volid}' to storage '${targetsid}' failed - command 'set -o pipefail && ` +
          `pvesm export ${volid} raw+size - -with-snapshots 0 | /usr/bin/ssh -e none -o 'BatchMode=yes' ` +
          `-o 'HostKeyAlias=${req.target}' root@${ip} -- pvesm import ${target} raw+size - -with-snapshots 0 ` +
          `-allow-rename 1' failed: exit code 255`,
      );
    }
    const newVolid = `${targetsid}:${copy.volname}`;
    this.log(`successfully imported '${newVolid}'`);
    return newVolid;
  }

  async phase1(vm: VmModel): Promise<void> {
    this.log(`starting migration of VM ${vm.vmid} to node '${this.req.target}' (${nodeIp(this.ctx, this.req.target)})`);
    vm.config.set('lock', 'migrate');
    this.scan(vm);
    if (this.local.size > 0) this.log('copying local disk images');
    for (const [volid, { vol, targetsid }] of [...this.local].sort(([a], [b]) => a.localeCompare(b))) {
      const newVolid = await this.copyVolume(volid, vol, targetsid);
      this.volumeMap.set(volid, newVolid);
      this.log(`volume '${volid}' is '${newVolid}' on the target`);
    }
  }

  async phase1Cleanup(vm: VmModel): Promise<void> {
    this.log('aborting phase 1 - cleanup resources');
    vm.config.delete('lock');
    for (const newVolid of this.volumeMap.values()) {
      const ref = parseVolid(newVolid);
      if (!ref) continue;
      try {
        await freeVolume(this.ctx, this.req.target, ref.storage, ref.volname);
      } catch (e) {
        this.log(errText(e), 'err');
      }
    }
  }

  async phase3Cleanup(vm: VmModel): Promise<void> {
    const remap = (v: string) => {
      for (const [from, to] of this.volumeMap) {
        if (v === from) return to;
        if (v.startsWith(`${from},`)) return to + v.slice(from.length);
      }
      return v;
    };
    for (const map of [vm.config, vm.pending]) for (const [k, v] of map) map.set(k, remap(v));
    // move_config_to_node: the config file now lives under the target node
    vm.movedFrom = { node: vm.node, atMs: Date.now() };
    vm.node = this.req.target;
    const cleanupFails = this.ctx.faults.get().migrateFail === 'cleanup';
    for (const [volid, { vol }] of this.local) {
      try {
        if (cleanupFails) {
          throw fail(
            `lvremove '${getStorage(this.ctx, this.req.node, vol.storage).vgname}/${vol.volname}' error:   ` +
              `Logical volume ${vol.volname} is used by another device.`,
          );
        }
        await freeVolume(this.ctx, this.req.node, vol.storage, vol.volname);
      } catch (e) {
        this.log(`removing local copy of '${volid}' failed - ${errText(e)}`, 'err');
        this.errors = true;
      }
    }
    vm.config.delete('lock');
  }
}

/** The body of a `qmigrate` task. Throws `migration aborted` / `migration problems` like PVE. */
export async function migrateOffline(ctx: SimContext, req: MigrateRequest, out: TaskLog): Promise<void> {
  getNode(ctx, req.target);
  const started = Date.now();
  const m = new Migration(ctx, req, out);
  const lockFile = migrateLockFile(req.vmid);
  const f = ctx.faults.get();
  await ctx.locks.withLock(lockKey(req.node, lockFile), lockFile, f.lockTimeoutMs, 0, async () => {
    try {
      const vm = loadVm(ctx, req.node, req.vmid);
      await withVmLock(ctx, vm, async () => {
        m.prepare(loadVm(ctx, req.node, req.vmid));
        try {
          await m.phase1(vm);
        } catch (e) {
          m.log(errText(e), 'err');
          try {
            await m.phase1Cleanup(vm);
          } catch (e2) {
            m.log(errText(e2), 'err');
          }
          throw e;
        }
        await m.phase3Cleanup(vm);
      });
    } catch (e) {
      m.log(`migration aborted (duration ${duration(started)}): ${errText(e)}`, 'err');
      throw fail('migration aborted');
    }
  });
  if (m.errors) {
    m.log(`migration finished with problems (duration ${duration(started)})`, 'err');
    throw fail('migration problems');
  }
  m.log(`migration finished successfully (duration ${duration(started)})`);
}
