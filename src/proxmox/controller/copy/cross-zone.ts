// A restore or clone into another zone (docs/snapshots.md, "Into another zone"): the thin copy is
// made on the source's host into the volume VM as for the same zone, grown there if asked, and
// then the volume VM, still holding its clone as scsi0, migrates offline to the requested host
// (POST …/migrate, the path `pve-nfs-csi move` takes): Proxmox copies the clone in full
// (pvesm export | import, raw+size; an LVM-thin linked clone is a volume like any other to
// QemuMigrate) and frees it on the source. There the volume VM lets go of it as for the same
// zone. Every step is a `copy` permit of the gate; a retry finds the volume VM on either host.
import { AlreadyExists, Busy } from '../../../errors.js';
import { sleep } from '../../api/tasks.js';
import { diskOwner, parseVolid } from '../../volume-id.js';
import {
  type CopyContext,
  type CopyRequest,
  MIGRATE_TIMEOUT_MS,
  digestOf,
  dropStaleCopy,
  findHelper,
  growHeld,
  linkedCopy,
  restoreCopy,
  runStep,
} from './thin-copy.js';

export interface Carried {
  vmid: number;
  volid: string;
  /** The host the volume is on now: `to`. */
  node: string;
  /** The offline migration this call ran (undefined when an earlier attempt ran it). */
  copied?: { bytes: number; seconds: number };
}

const POLL_MS = 1000;
/** /cluster/resources trails a migration by a few seconds (pmxcfs); the config read decides. */
const APPEAR_MS = 60_000;

/**
 * Restores `req` (its source on `req.node`) into a volume VM on `to`. `beforeCopy` runs right
 * before the migration is sent (the thin-pool guard of the target: the copy there is full).
 */
export async function restoreInto(
  c: CopyContext,
  req: CopyRequest,
  to: string,
  sizeBytes: number | undefined,
  beforeCopy: (bytes: number) => Promise<void>,
): Promise<Carried> {
  const finish = async (copied?: Carried['copied']): Promise<Carried> => {
    const made = await restoreCopy(c, { ...req, node: to }, sizeBytes, () => {
      throw new Busy(`volume ${req.name}: the volume VM on ${to} holds no clone to let go of; retry`);
    });
    return { ...made, node: to, ...(copied && { copied }) };
  };
  if (await findHelper(c, to, 'volume', req.name)) return finish();
  await dropStaleCopy(c, req.node, req.name);

  let held = await findHelper(c, req.node, 'volume', req.name);
  if (held && migrating(held)) {
    // A migration an earlier attempt started (the task outlives a killed controller): wait for it.
    c.log('waiting for the migration an earlier attempt started', { vmid: held.vm.vmid, from: req.node, to });
    held = await migrationEnded(c, req, to);
    if (!held) return finish();
  }
  if (held && !held.drives.length)
    throw new AlreadyExists(
      `volume ${req.name} was restored on ${req.node} (volume VM ${held.vm.vmid} let go of it there), not on ${to}`,
    );
  const storage = parseVolid(req.volid)?.storage ?? '';
  // A VMID whose disks the target holds cannot migrate there (copy-vms.ts migrateProblem): the
  // volume VM takes another one, free in the cluster and on the target.
  const owners = await ownersOn(c, to, storage);
  const made = held
    ? { vmid: held.vm.vmid, volid: held.drives[0]?.volid ?? '' }
    : await linkedCopy(c, req, 'volume', (id) => owners.has(id));
  if (held && owners.has(made.vmid)) {
    // Disks of that VMID appeared on the target since the clone was made: the clone is given up
    // (the volume VM destroyed with it) so the retry makes a new one under a VMID that can move.
    await runStep(c, { op: 'destroy', node: req.node, vmid: made.vmid });
    throw new Busy(
      `volume ${req.name}: ${to} holds disks of VMID ${made.vmid} (not this driver's), so its volume VM cannot migrate there; the copy was removed, retry to make it under another VMID`,
    );
  }
  if (sizeBytes !== undefined) await growHeld(c, req.node, made, sizeBytes, await digestOf(c, req.node, made.vmid));
  const items = await c.cluster.api.listContent(req.node, storage, made.vmid, { signal: c.signal });
  const bytes = items.find((i) => i.volid === made.volid)?.size ?? 0;
  await beforeCopy(bytes);
  c.log('copying the restored disk to another host (offline migration of its volume VM)', {
    volid: made.volid,
    vmid: made.vmid,
    from: req.node,
    to,
    bytes,
  });
  const t0 = Date.now();
  await runStep(c, { op: 'migrate', node: req.node, vmid: made.vmid, volid: made.volid, target: to });
  const seconds = (Date.now() - t0) / 1000;
  c.log('restored disk copied to another host', { vmid: made.vmid, from: req.node, to, bytes, seconds });
  await appeared(c, to, req.name);
  return finish({ bytes, seconds });
}

/** The VMIDs that own volumes on `storage` of host `node` (a host without the storage: none). */
async function ownersOn(c: CopyContext, node: string, storage: string): Promise<Set<number>> {
  const items = await c.cluster.api.listContent(node, storage, undefined, { signal: c.signal }).catch(() => []);
  return new Set(items.map((i) => diskOwner(parseVolid(i.volid)?.disk ?? '')).filter((x) => x !== undefined));
}

/** A volume VM a migration holds (Proxmox's `lock: migrate` while the task runs). */
const migrating = (h: { entries: readonly { key: string; value?: unknown }[] }): boolean =>
  h.entries.some((e) => e.key === 'lock' && e.value === 'migrate');

/** Polls until the volume VM is no longer locked by a migration; returns it if it is still on the source. */
async function migrationEnded(c: CopyContext, req: CopyRequest, to: string) {
  const end = Date.now() + MIGRATE_TIMEOUT_MS;
  for (;;) {
    await sleep(POLL_MS, c.signal);
    if (await findHelper(c, to, 'volume', req.name)) return undefined;
    const held = await findHelper(c, req.node, 'volume', req.name);
    if (!held) {
      await appeared(c, to, req.name);
      return undefined;
    }
    if (!migrating(held)) return held;
    if (Date.now() > end) throw new Busy(`volume VM ${held.vm.vmid} is still migrating to ${to}`);
  }
}

async function appeared(c: CopyContext, to: string, name: string): Promise<void> {
  const end = Date.now() + APPEAR_MS;
  while (!(await findHelper(c, to, 'volume', name))) {
    if (Date.now() > end) throw new Busy(`volume ${name}: its volume VM does not show on ${to} yet; retry`);
    await sleep(POLL_MS / 4, c.signal);
  }
}
