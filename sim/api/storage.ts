// /nodes/{node}/storage/{storage}/…: status, content list, allocate (POST), volume info, free (DELETE
// as an `imgdel` task).

import { fail, paramError } from '../http/errors.js';
import type { Perms } from '../http/auth.js';
import { NODE, STORAGE, VMID } from '../http/params.js';
import type { Route } from '../http/router.js';
import { volumeOwner } from '../model/drive.js';
import { parseAllocSizeKiB } from '../model/sizes.js';
import { type SimContext, getNode, getStorage } from '../ops/context.js';
import { allocVolume, freeVolume, storageUsage } from '../ops/storage.js';
import { parseVolname, volumePath } from '../ops/plugins.js';
import { statusIsError } from '../tasks.js';
import { defined } from '../defined.js';

/**
 * PVE::Storage::check_volume_access for image volumes (the caller has had the plugin parse the
 * name first: an unparsable one dies, a 500 or, in the content listing, a skipped volume), then
 * Datastore.Allocate on the storage is enough; otherwise the owner VM itself may, and anyone
 * with Datastore.Audit on the storage and VM.Config.Disk on the owner.
 */
export function checkVolumeAccess(perms: Perms, storage: string, volname: string, vmid?: number): void {
  if (perms.has('Datastore.Allocate')) return;
  const owner = volumeOwner(volname);
  if (owner === undefined) {
    perms.check(`/storage/${storage}`, ['Datastore.Allocate']);
    return;
  }
  if (vmid !== undefined && owner === vmid) return;
  perms.check(`/storage/${storage}`, ['Datastore.Audit']);
  perms.check(`/vms/${owner}`, ['VM.Config.Disk']);
}

/** parse_volname of a volume a VM config names, on the storage as that node sees it (unknown storages are left to later checks). */
export function volnameParser(sim: SimContext, node: string): (storage: string, volname: string) => void {
  return (storage, volname) => {
    const st = getNode(sim, node).storages.get(storage);
    if (st) parseVolname(st, volname);
  };
}

/** `volume` may be `storage:volname` or a bare name with the storage from the path. */
function realVolumeId(storage: string | undefined, volume: string): { storage: string; volname: string } {
  const i = volume.indexOf(':');
  if (i >= 0) {
    const sid = volume.slice(0, i);
    if (storage && sid !== storage) throw paramError({ volume: `storage ID mismatch (${sid} != ${storage})\n` });
    return { storage: sid, volname: volume.slice(i + 1) };
  }
  if (!storage) throw paramError({ volume: 'no storage specified - incomplete volume ID' });
  return { storage, volname: volume };
}

const STORAGE_AUDIT = (p: Perms, raw: Record<string, string>) =>
  p.checkAny(`/storage/${raw.storage}`, ['Datastore.Audit', 'Datastore.AllocateSpace']);

async function statusOf(sim: SimContext, node: string, storage: string) {
  const st = getStorage(sim, node, storage);
  const u = await storageUsage(sim, st);
  return {
    active: 1,
    avail: u.avail,
    content: st.content,
    enabled: 1,
    shared: st.shared ? 1 : 0,
    total: u.total,
    type: st.type,
    used: u.used,
  };
}

export const storageRoutes: Route[] = [
  {
    method: 'GET',
    template: '/nodes/{node}/storage/{storage}/status',
    schema: { properties: { node: NODE, storage: STORAGE } },
    perm: STORAGE_AUDIT,
    handler: ({ sim, params }) => statusOf(sim, defined(params.node, 'node'), defined(params.storage, 'storage')),
  },
  {
    method: 'GET',
    template: '/nodes/{node}/storage/{storage}/content',
    schema: {
      properties: {
        node: NODE,
        storage: STORAGE,
        content: {
          type: 'string',
          optional: true,
          enum: ['images', 'rootdir', 'vztmpl', 'iso', 'backup', 'snippets', 'import'],
        },
        vmid: { ...VMID, optional: true },
      },
    },
    perm: STORAGE_AUDIT,
    handler: ({ sim, params, perms }) => {
      const st = getStorage(sim, defined(params.node, 'node'), defined(params.storage, 'storage'));
      if (params.content && params.content !== 'images' && params.content !== 'rootdir') return [];
      const vmid = params.vmid ? Number(params.vmid) : undefined;
      const out: unknown[] = [];
      for (const v of [...st.volumes.values()].sort((a, b) => a.volname.localeCompare(b.volname))) {
        if (vmid !== undefined && v.ownerVmid !== vmid) continue;
        try {
          parseVolname(st, v.volname);
          checkVolumeAccess(perms, st.id, v.volname);
        } catch {
          continue;
        }
        out.push({
          volid: `${st.id}:${v.volname}`,
          format: v.format,
          size: v.sizeBytes,
          vmid: v.ownerVmid,
          ctime: v.ctime,
          content: 'images',
        });
      }
      return out;
    },
  },
  {
    method: 'POST',
    template: '/nodes/{node}/storage/{storage}/content',
    schema: {
      properties: {
        node: NODE,
        storage: STORAGE,
        filename: { type: 'string' },
        vmid: VMID,
        size: { type: 'string', pattern: /\d+[MG]?/ },
        format: { type: 'string', optional: true, enum: ['raw', 'qcow2', 'subvol', 'vmdk'] },
      },
    },
    perm: (p, raw) => p.check(`/storage/${raw.storage}`, ['Datastore.AllocateSpace']),
    handler: async ({ sim, params }) => {
      const size = defined(params.size, 'size');
      const filename = defined(params.filename, 'filename');
      const kib = parseAllocSizeKiB(size);
      if (kib === undefined) throw paramError({ size: `unable to parse size '${size}'` });
      let format = params.format;
      const m = /\.(raw|qcow2|vmdk)$/.exec(filename);
      if (m) {
        if (format && format !== m[1]) throw paramError({ format: `different storage formats (${format} != ${m[1]})` });
        format = m[1];
      }
      return allocVolume(
        sim,
        defined(params.node, 'node'),
        defined(params.storage, 'storage'),
        Number(params.vmid),
        filename,
        kib,
        format,
      );
    },
  },
  {
    method: 'GET',
    template: '/nodes/{node}/storage/{storage}/content/{volume}',
    schema: { properties: { node: NODE, storage: { ...STORAGE, optional: true }, volume: { type: 'string' } } },
    handler: ({ sim, params, perms }) => {
      const { storage, volname } = realVolumeId(params.storage, defined(params.volume, 'volume'));
      const st = getStorage(sim, defined(params.node, 'node'), storage);
      parseVolname(st, volname);
      checkVolumeAccess(perms, storage, volname);
      const v = st.volumes.get(volname);
      if (!v) throw fail(`volume_size_info on '${storage}:${volname}' failed - no format`);
      return { path: volumePath(st, volname), size: v.sizeBytes, used: 0, format: v.format };
    },
  },
  {
    method: 'DELETE',
    template: '/nodes/{node}/storage/{storage}/content/{volume}',
    schema: {
      properties: {
        node: NODE,
        storage: { ...STORAGE, optional: true },
        volume: { type: 'string' },
        delay: { type: 'integer', optional: true, minimum: 1, maximum: 30 },
      },
    },
    handler: async ({ sim, params, perms, user }) => {
      const node = defined(params.node, 'node');
      const { storage, volname } = realVolumeId(params.storage, defined(params.volume, 'volume'));
      // PVE::Storage::path → the plugin's parse_volname, before any privilege check
      parseVolname(getStorage(sim, node, storage), volname);
      perms.check(`/storage/${storage}`, ['Datastore.Allocate']);
      const owner = volumeOwner(volname);
      const volid = `${storage}:${volname}`;
      const task = sim.tasks.start(
        node,
        'imgdel',
        `${owner !== undefined ? `${owner}@` : ''}${storage}`,
        user,
        async (log) => {
          await freeVolume(sim, node, storage, volname, log);
          log.print(`Removed volume '${volid}'`);
        },
      );
      if (params.delay) {
        const exitstatus = await sim.tasks.waitFor(task, Number(params.delay) * 1000);
        if (exitstatus !== undefined) {
          if (!statusIsError(exitstatus)) return null;
          throw fail(exitstatus);
        }
      }
      return task.upid;
    },
  },
];
