// `report --fix --yes`: carries out the actions findings.ts allowed, each through the driver's
// own code path (DeleteVolume, the per-VM detach queue, the helper-leftover cleanup, the NFS
// delete policy) and, for Proxmox, through the ownership gate, which decides again right before
// acting from what is there now: the PVs re-read (a CreateVolume that was in flight) are the
// day-2 proof the gate takes (ownership-day2.ts: provenUnclaimed); DeleteVolume re-reads every VM
// config, and a marker is freed only as a leftover (decideFreeLeftover) on a fresh read of its
// host's VMs: a disk attached or snapshotted since the scan is kept.
import type { Logger } from 'pino';
import type { KubeApi } from '../../k8s/index.js';
import { deleteVolumeDir } from '../../nfs/controller/rpc/policy.js';
import { readSnapshotDir } from '../../nfs/controller/snapshots/snapshot-scan.js';
import { SNAPSHOTS } from '../../nfs/controller/snapshots/snapshots.js';
import { readRestoreMarker } from '../../nfs/controller/snapshots/restore-markers.js';
import type { NfsStores } from '../../nfs/controller/store/store.js';
import { waitTask } from '../../proxmox/api/tasks.js';
import { type Cluster, holdsImages } from '../../proxmox/controller/state/cluster.js';
import { runStep } from '../../proxmox/controller/copy/thin-copy.js';
import { removeHelperVm } from './helper-vms.js';
import type { Core } from '../../proxmox/controller/core.js';
import { removeHelperLeftovers } from '../../proxmox/controller/safety/leftovers.js';
import { deleteVolume } from '../../proxmox/controller/rpc/volumes.js';
import { readFresh } from '../../proxmox/controller/safety/fresh-read.js';
import { must } from '../../proxmox/controller/safety/ownership.js';
import { type Unclaimed, decideFreeLeftover, provenUnclaimed } from '../../proxmox/controller/safety/ownership-day2.js';
import { parseVolid, parseVolumeId } from '../../proxmox/volume-id.js';
import { PROXMOX_DRIVER, type NfsFacts } from './facts.js';
import type { Action } from './findings.js';
import { nfsView, snapshotDirUser } from './nfs-findings.js';
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

/** The PVs as they are now (re-read right before acting): a CreateVolume may have been in flight. */
async function pvsNow(ctx: FixContext) {
  return ctx.kube.listPersistentVolumes(ctx.signal);
}

/** The day-2 proof for the Proxmox gate: every Proxmox PV's handle, read now. */
function proofOf(pvs: Awaited<ReturnType<typeof pvsNow>>, region: string): Unclaimed {
  const pvHandles = pvs.flatMap((pv) =>
    pv.spec?.csi?.driver === PROXMOX_DRIVER ? [{ pv: pv.metadata?.name ?? '?', handle: pv.spec.csi.volumeHandle }] : [],
  );
  return { region, pvHandles };
}

const logOf = (ctx: FixContext) => (msg: string, fields?: Record<string, unknown>) => ctx.log.info(fields ?? {}, msg);

function clusterOf(ctx: FixContext, region: string): Cluster {
  const c = ctx.core.clusters.get(region);
  if (!c) throw new Error(`no Proxmox cluster with region ${region}`);
  return c;
}

/** Carries out one action; resolves with what was done, rejects with why not. */
export async function runAction(ctx: FixContext, a: Action): Promise<string> {
  const pvs = await pvsNow(ctx);
  const call = { log: ctx.log, signal: ctx.signal };
  switch (a.type) {
    case 'delete-volume': {
      const ref = parseVolumeId(a.volumeId);
      if (!ref) throw new Error(`unreadable volume id ${a.volumeId}`);
      // The PV proof here, the rest of the DeleteVolume rule (a fresh read) in deleteVolume itself.
      must(provenUnclaimed(ref, proofOf(pvs, a.region)));
      await deleteVolume(ctx.core, { volumeId: a.volumeId, secrets: {} }, call);
      return 'freed';
    }
    case 'free-marker': {
      const cluster = clusterOf(ctx, a.region);
      const ref = parseVolid(a.volid);
      if (!ref) throw new Error(`unreadable volume ${a.volid}`);
      const d = { storage: ref.storage, disk: ref.disk, controllerVmId: ctx.core.controllerVmId };
      // A shared storage's volume can be named by a VM on any host.
      const view = await readFresh(cluster, a.shared ? undefined : [a.node], ctx.signal);
      const permit = must(decideFreeLeftover(d, a.node, view, proofOf(pvs, a.region)));
      const upid = await cluster.port.freeLeftover(permit, { signal: ctx.signal });
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
    case 'remove-helper': {
      const cluster = clusterOf(ctx, a.region);
      const c = { cluster, controllerVmId: ctx.core.controllerVmId, signal: ctx.signal, log: logOf(ctx) };
      return removeHelperVm(
        {
          api: cluster.api,
          storages: async () => (await cluster.storages(ctx.signal, true)).filter(holdsImages),
          step: (s) => runStep(c, s),
          controllerVmId: ctx.core.controllerVmId,
          signal: ctx.signal,
          now: Date.now,
        },
        a,
      );
    }
    case 'remove-dir': {
      const pv = referencedBy(nfsView(ctx.nfs, pvs), a.server, absolute(a.share, a.path))?.pv;
      if (pv) throw new Error(`left alone: PV ${pv} now refers to it`);
      const removed = await deleteVolumeDir(ctx.stores.open(a.server, a.share), a.path, { signal: ctx.signal });
      return removed ? 'removed' : 'already gone';
    }
    case 'remove-partial-snapshot': {
      const pv = snapshotDirUser(nfsView(ctx.nfs, pvs), a)?.pv;
      if (pv) throw new Error(`left alone: PV ${pv} now uses it`);
      return removePartialSnapshot(ctx, a);
    }
    case 'remove-restore-marker':
      return removeRestoreMarker(ctx, a);
  }
}

/**
 * A partial NFS snapshot, judged again on a fresh read: still one directory right below
 * .snapshots/, still without its completion record, nothing changed since it was judged (older
 * than the grace period then). The removal is the gate's (a boundary walk, no symlink followed).
 */
async function removePartialSnapshot(
  ctx: FixContext,
  a: Extract<Action, { type: 'remove-partial-snapshot' }>,
): Promise<string> {
  const entry = a.dir.slice(SNAPSHOTS.length + 1);
  if (!a.dir.startsWith(`${SNAPSHOTS}/`) || entry === '' || entry.includes('/') || entry.startsWith('.'))
    throw new Error(`left alone: ${a.dir} is not a snapshot directory`);
  const store = ctx.stores.open(a.server, a.share);
  const now = await readSnapshotDir(store, entry, { signal: ctx.signal, sizes: false });
  if (!now) return 'already gone';
  if (now.complete) throw new Error('left alone: it is complete now (its copy finished)');
  if (!now.ours || !now.changedAt || now.changedAt > a.changedAt)
    throw new Error('left alone: it changed since the listing (a copy may be running into it)');
  return (await store.removeTree(a.dir, { signal: ctx.signal })) ? 'removed' : 'already gone';
}

/**
 * A restore record whose claim was gone, judged again on a fresh read: still the driver's empty
 * record, untouched since it was judged, its claim still missing. The rmdir is the gate's. A
 * restore that made its claim between the read and the rmdir gets its record back (the claim is
 * read again after): without it, a kill of that restore would leave a partial claim that the
 * next attempt answers as complete.
 */
async function removeRestoreMarker(
  ctx: FixContext,
  a: Extract<Action, { type: 'remove-restore-marker' }>,
): Promise<string> {
  const entry = a.marker.slice(SNAPSHOTS.length + 1);
  if (!a.marker.startsWith(`${SNAPSHOTS}/`) || entry.includes('/'))
    throw new Error(`left alone: ${a.marker} is not a restore record`);
  const store = ctx.stores.open(a.server, a.share);
  const o = { signal: ctx.signal };
  const now = await readRestoreMarker(store, entry, o);
  if (!now) return 'already gone';
  if (now.claim === undefined || now.type !== 'dir' || now.entries > 0)
    throw new Error(`left alone: ${a.marker} is not a restore record the driver makes`);
  if (now.target !== 'missing') throw new Error(`left alone: its claim ${now.claim} exists now (a restore started)`);
  if (now.changedAt === undefined || now.changedAt > a.changedAt)
    throw new Error('left alone: it changed since the listing (a restore may be starting)');
  const r = await store.removeDirIfEmpty(a.marker, o);
  if (r === 'not-empty') throw new Error('left alone: it holds entries now');
  // Unreadable counts as there: the record goes back unless the claim is provably still missing.
  const after = await store.stat(now.claim, o).catch(() => 'unknown' as const);
  if (after !== null) {
    await store.ensureDir(a.marker, {}, o);
    throw new Error(`left alone: its claim ${now.claim} appeared meanwhile (a restore started); the record is back`);
  }
  return r === 'removed' ? 'removed' : 'already gone';
}
