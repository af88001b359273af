// `report --fix --yes`: carries out the actions findings.ts allowed, each through the driver's
// own code path (DeleteVolume, the per-VM detach queue, the helper-leftover cleanup, the NFS
// delete policy), after re-checking right before acting what could have changed since the scan:
// a PV may have appeared for the disk or the directory (a CreateVolume that was in flight).
// DeleteVolume itself re-reads every VM config and refuses a disk that got attached meanwhile.
import type { Logger } from 'pino';
import type { KubeApi } from '../../k8s/index.js';
import { deleteVolumeDir } from '../../nfs/controller/policy.js';
import type { NfsStores } from '../../nfs/controller/store.js';
import { waitTask } from '../../proxmox/api/tasks.js';
import type { Cluster } from '../../proxmox/controller/state/cluster.js';
import type { Core } from '../../proxmox/controller/core.js';
import { removeHelperLeftovers } from '../../proxmox/controller/safety/leftovers.js';
import { deleteVolume } from '../../proxmox/controller/rpc/volumes.js';
import { parseVolid, parseVolumeId } from '../../proxmox/volume-id.js';
import { PROXMOX_DRIVER, type NfsFacts } from './facts.js';
import type { Action } from './findings.js';
import { nfsView } from './nfs-findings.js';
import { absolute, referencedBy } from './ownership.js';

export interface FixContext {
  core: Core;
  kube: KubeApi;
  stores: NfsStores;
  /** The classes and resolved servers the findings were judged with (ownership.ts). */
  nfs: Pick<NfsFacts, 'classes' | 'addresses'>;
  log: Logger;
  signal: AbortSignal;
}

/** Does any PV (re-read now) name this disk or directory? */
async function claimedNow(ctx: FixContext, a: Action): Promise<string | undefined> {
  const pvs = await ctx.kube.listPersistentVolumes(ctx.signal);
  if (a.type === 'remove-dir') {
    return referencedBy(nfsView(ctx.nfs, pvs), a.server, absolute(a.share, a.path))?.pv;
  }
  if (a.type === 'delete-volume' || a.type === 'free-marker') {
    const target = a.type === 'delete-volume' ? parseVolumeId(a.volumeId) : parseVolid(a.volid);
    if (!target) return `(unreadable target ${a.type === 'delete-volume' ? a.volumeId : a.volid})`;
    const { storage, disk } = target;
    const hit = pvs.find((pv) => {
      if (pv.spec?.csi?.driver !== PROXMOX_DRIVER) return false;
      const ref = parseVolumeId(pv.spec.csi.volumeHandle);
      return (
        !!ref &&
        ref.region === a.region &&
        ref.storage === storage &&
        (disk === ref.disk || disk.startsWith(ref.disk + '+'))
      );
    });
    return hit?.metadata?.name;
  }
  return undefined;
}

function clusterOf(ctx: FixContext, region: string): Cluster {
  const c = ctx.core.clusters.get(region);
  if (!c) throw new Error(`no Proxmox cluster with region ${region}`);
  return c;
}

/** Carries out one action; resolves with what was done, rejects with why not. */
export async function runAction(ctx: FixContext, a: Action): Promise<string> {
  const pv = await claimedNow(ctx, a);
  if (pv) throw new Error(`left alone: PV ${pv} now refers to it`);
  const call = { log: ctx.log, signal: ctx.signal };
  switch (a.type) {
    case 'delete-volume':
      await deleteVolume(ctx.core, { volumeId: a.volumeId, secrets: {} }, call);
      return 'freed';
    case 'free-marker': {
      const cluster = clusterOf(ctx, a.region);
      const upid = await cluster.api.freeDisk(a.node, a.storage, a.volid, { signal: ctx.signal });
      if (upid)
        await waitTask(cluster.api, a.node, upid, { cluster: a.region, what: `free ${a.volid}`, signal: ctx.signal });
      return 'freed';
    }
    case 'drop-unused':
      await clusterOf(ctx, a.region).queues.detach(a.vm, { storage: a.storage, disk: a.disk }, ctx.signal);
      return 'entry removed';
    case 'unlink-helpers': {
      const ref = parseVolumeId(a.volumeId);
      if (!ref) throw new Error(`unreadable volume id ${a.volumeId}`);
      const cluster = clusterOf(ctx, a.region);
      const vms = await cluster.exclusive(`${ref.storage}:${ref.disk}`, () =>
        removeHelperLeftovers(cluster, ref, call),
      );
      return vms.length ? `unlinked from ${vms.map((v) => v.name).join(', ')}` : 'already gone';
    }
    case 'remove-dir': {
      const removed = await deleteVolumeDir(ctx.stores.open(a.server, a.share), a.path, { signal: ctx.signal });
      return removed ? 'removed' : 'already gone';
    }
  }
}
