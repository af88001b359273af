// A thin copy of one disk through helper VMs (docs/snapshots.md, "Proxmox: design"): a copy
// VM holds only the source as scsi0 and is snapshotted (a storage-level LVM-thin snapshot,
// crash-consistent while a worker keeps writing to the disk), a linked clone is made from that
// snapshot, and the copy VM and its snapshot are removed. A snapshot is that clone, kept in its
// snapshot VM; a restore or clone keeps it in a volume VM, which owns it without referencing it
// (restoreCopy). Every call is a step the
// ownership gate decides on a fresh read (ownership.ts decideCopyStep). The helper VMIDs follow
// from the operation's name, so a retry after a crash finds what the last attempt left.
import { createHash } from 'node:crypto';
import { Busy } from '../../../errors.js';
import { waitTask } from '../../api/tasks.js';
import type { VmResource } from '../../api/api.js';
import { type Cluster, holdsImages, isAvailable } from '../state/cluster.js';
import { readFresh } from '../safety/fresh-read.js';
import {
  type CopyRecord,
  type CopyRole,
  type CopyStep,
  type CopyView,
  type MigrationTarget,
  COPY_VM_NAMES,
  RELEASED,
  helperFacts,
  parseRecord,
  releasedVolume,
  snapnameFor,
} from '../safety/copy-vms.js';
import { decideCopyStep, must } from '../safety/ownership.js';

/** Helper VMIDs live in [800000000, 900000000): far above what Proxmox hands out by default. */
const VMID_BASE = 800_000_000;
const VMID_SPAN = 100_000_000;
const MiB = 1024 * 1024;
/** How long one offline migration may run (a large disk copies for a while); the task goes on after. */
export const MIGRATE_TIMEOUT_MS = 6 * 3600_000;

export interface CopyContext {
  cluster: Cluster;
  controllerVmId: number;
  signal: AbortSignal;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface CopyRequest {
  node: string;
  /** The source volume, storage:disk. */
  volid: string;
  /** The source's volume (or snapshot) handle, for the record. */
  source: string;
  /** The CSI snapshot name, or the new volume's name. */
  name: string;
}

const hashOf = (s: string) => createHash('sha256').update(s).digest();

/** The VMID a helper of `role` for `name` takes: hashed into the range, then the next free one. */
export function helperVmid(role: CopyRole, name: string, taken: (vmid: number) => boolean): number {
  let n = hashOf(`${role}\0${name}`).readUInt32BE(0) % VMID_SPAN;
  for (let i = 0; i < 64; i++, n = (n + 1) % VMID_SPAN) if (!taken(VMID_BASE + n)) return VMID_BASE + n;
  throw new Busy(`no free helper VMID for ${name}`);
}

/** The host read now (fresh-read.ts) and the cluster's VMIDs: what every copy step is decided on. */
export const copyView = (c: CopyContext, node: string): Promise<CopyView> => view(c, node);

async function view(c: CopyContext, node: string) {
  const [host, all] = await Promise.all([
    readFresh(c.cluster, [node], c.signal),
    c.cluster.api.vmResources({ signal: c.signal }),
  ]);
  return { host, vmids: new Set(all.map((v) => v.vmid)), controllerVmId: c.controllerVmId };
}

/**
 * The helper VM of `role` this controller made for `name`, on any host: among `vms` (a VM list)
 * only those with the role's name and a VMID helperVmid can have given `name` are read, so the
 * usual answer costs no call beyond the list.
 */
export async function namedHelper(
  c: CopyContext,
  vms: readonly VmResource[],
  role: CopyRole,
  name: string,
): Promise<{ vm: VmResource; record: CopyRecord } | undefined> {
  const first = VMID_BASE + (hashOf(`${role}\0${name}`).readUInt32BE(0) % VMID_SPAN);
  const inWindow = (id: number) => (id - first + VMID_SPAN) % VMID_SPAN < 64 && id >= VMID_BASE;
  for (const vm of vms.filter((x) => x.name === COPY_VM_NAMES[role] && inWindow(x.vmid))) {
    const conf = await c.cluster.api.vmConfig(vm.node, vm.vmid, { signal: c.signal }).catch(() => undefined);
    const record = parseRecord(conf?.values.description);
    if (record?.role === role && record.name === name && record.controller === c.controllerVmId) return { vm, record };
  }
  return undefined;
}

/** Decides one step on a fresh read, sends it and waits for its task. */
export async function runStep(c: CopyContext, step: CopyStep): Promise<void> {
  return run(c, step);
}

/** A migration's target host, read now: its available image storages, and the helper's volumes on the step's. */
async function targetOf(c: CopyContext, node: string, vmid: number, volid: string): Promise<MigrationTarget> {
  const storage = volid.split(':')[0] ?? '';
  const rows = (await c.cluster.storages(c.signal, true)).filter((r) => r.node === node && holdsImages(r));
  const storages = rows.filter(isAvailable).map((r) => r.storage);
  const items = storages.includes(storage)
    ? await c.cluster.api.listContent(node, storage, vmid, { signal: c.signal })
    : [];
  return { node, storages, volids: items.map((i) => i.volid) };
}

async function run(c: CopyContext, step: CopyStep): Promise<void> {
  const v: CopyView = await view(c, step.node);
  if (step.op === 'migrate') v.target = await targetOf(c, step.target, step.vmid, step.volid);
  const permit = must(decideCopyStep(step, v));
  const upid = await c.cluster.port.copyStep(permit, { signal: c.signal });
  await waitTask(c.cluster.api, step.node, upid, {
    cluster: c.cluster.region,
    what:
      step.op === 'migrate' ? `migrate volume VM ${step.vmid} to ${step.target}` : `${step.op} helper VM ${step.vmid}`,
    signal: c.signal,
    ...(step.op === 'migrate' && { timeoutMs: MIGRATE_TIMEOUT_MS }),
  });
  // This process's own free, like DeleteVolume's: a retry must not find the disk in the cached
  // content and take it for an orphan whose owner VM is gone. A migration frees its source copy.
  if (step.op === 'free') c.cluster.content.removed(step.node, step.storage, step.volid);
  if (step.op === 'migrate') c.cluster.content.removed(step.node, step.volid.split(':')[0] ?? '', step.volid);
}

/** The helper VM of `role` that `name`'s record names on the host, if one exists. */
export async function findHelper(c: CopyContext, node: string, role: CopyRole, name: string) {
  const v = await view(c, node);
  for (const e of v.host.entries) {
    const f = helperFacts(v.host, e.vm.vmid);
    if (f?.record?.role === role && f.record.name === name && f.record.controller === c.controllerVmId) return f;
  }
  return undefined;
}

/** Removes a copy VM (its snapshot first): what an interrupted attempt left, or this one's. */
async function dropCopyVm(c: CopyContext, node: string, vmid: number): Promise<void> {
  const sections = (await view(c, node)).host.snapshots.get(vmid) ?? [];
  for (const s of sections) await run(c, { op: 'unsnapshot', node, vmid, snapname: s.name });
  await run(c, { op: 'destroy', node, vmid });
}

/**
 * The copy VM (and its snapshot) an earlier attempt for `name` left on `node`, removed: every
 * retry starts with it, also one whose clone was made already, so a kill after the clone leaves
 * nothing the retry does not clean (the source stays deletable without waiting for report).
 */
export async function dropStaleCopy(c: CopyContext, node: string, name: string): Promise<void> {
  const stale = await findHelper(c, node, 'copy', name);
  if (stale) await dropCopyVm(c, node, stale.vm.vmid);
}

/**
 * Makes the linked clone of `req.volid` in a new VM of `role` (a snapshot VM, or a restore VM
 * whose disk restore() hands on); returns that VM's VMID and the clone's volume id. `avoid`:
 * VMIDs the new VM must not take although they are free (a cross-zone target holds disks of them).
 */
export async function linkedCopy(
  c: CopyContext,
  req: CopyRequest,
  role: 'snapshot' | 'volume',
  avoid: (vmid: number) => boolean = () => false,
): Promise<{ vmid: number; volid: string }> {
  const record = (r: CopyRole): CopyRecord => ({
    role: r,
    controller: c.controllerVmId,
    name: req.name,
    source: req.source,
    created: Math.floor(Date.now() / 1000),
  });
  await dropStaleCopy(c, req.node, req.name);
  const done = await findHelper(c, req.node, role, req.name);
  const disk = done?.drives.find((d) => d.key === 'scsi0');
  if (done && disk) return { vmid: done.vm.vmid, volid: disk.volid };

  const v0 = await view(c, req.node);
  const copyVmid = helperVmid('copy', req.name, (id) => v0.vmids.has(id));
  const snapname = snapnameFor(req.name);
  await run(c, { op: 'create', node: req.node, vmid: copyVmid, record: record('copy') });
  try {
    const digest =
      helperFacts((await view(c, req.node)).host, copyVmid)?.entries.find((e) => e.key === 'digest')?.value ?? '';
    await run(c, { op: 'hold', node: req.node, vmid: copyVmid, volid: req.volid, digest });
    const t0 = Date.now();
    await run(c, { op: 'snapshot', node: req.node, vmid: copyVmid, snapname, volid: req.volid });
    c.log('thin snapshot taken', { source: req.volid, ms: Date.now() - t0 });
    const v1 = await view(c, req.node);
    const newid = helperVmid(role, req.name, (id) => v1.vmids.has(id) || avoid(id));
    await run(c, { op: 'clone', node: req.node, vmid: copyVmid, snapname, newid, record: record(role) });
    const made = helperFacts((await view(c, req.node)).host, newid)?.drives.find((d) => d.key === 'scsi0');
    if (!made) throw new Busy(`the linked clone VM ${newid} holds no disk`);
    return { vmid: newid, volid: made.volid };
  } finally {
    await dropCopyVm(c, req.node, copyVmid).catch((e: unknown) =>
      c.log('copy VM left for the next attempt', { vmid: copyVmid, err: (e as Error).message }),
    );
  }
}

/**
 * Restore or clone: the linked clone in a volume VM, grown to `sizeBytes` while the volume VM
 * still holds it as scsi0 (a stopped VM of ours: no guest, no other VM touched), which then
 * lets go of it (scsi0 unlinked, the unusedN Proxmox leaves overwritten with a name that is no
 * volume), so the new volume is `vm-<volume VM>-disk-0`, owned by an existing VM of ours and
 * referenced by none. Returns it. Each state a crash can leave is picked up by a retry: clone
 * held (grown or not), clone detached but not released, released.
 */
export async function restoreCopy(
  c: CopyContext,
  req: CopyRequest,
  sizeBytes?: number,
  make: () => Promise<{ vmid: number; volid: string }> = () => linkedCopy(c, req, 'volume'),
): Promise<{ vmid: number; volid: string }> {
  await dropStaleCopy(c, req.node, req.name);
  const held = await findHelper(c, req.node, 'volume', req.name);
  // Released earlier: the placeholder names the disk it stands for (`…-released-disk-0`).
  const released = held && held.drives.length === 0 ? releasedVolume(held) : undefined;
  if (held && released) {
    const { storage, disk } = released;
    const items = await c.cluster.api.listContent(req.node, storage, held.vm.vmid, { signal: c.signal });
    if (items.some((i) => i.volid === `${storage}:${disk}`)) return { vmid: held.vm.vmid, volid: `${storage}:${disk}` };
  }
  // Detached but not released yet: its own clone as unusedN (grown already: growing comes first).
  const unused = held?.entries.find(
    (e) => e.key.startsWith('unused') && e.value && !e.value.includes(`-${RELEASED}-`) && held.owned.includes(e.value),
  );
  const clone = held?.drives.length
    ? { vmid: held.vm.vmid, volid: held.drives[0]?.volid ?? '' }
    : held && unused?.value
      ? { vmid: held.vm.vmid, volid: unused.value }
      : undefined;
  const made = clone ?? (await make());
  const node = req.node;
  const digest = () => digestOf(c, node, made.vmid);
  if (helperFacts((await view(c, node)).host, made.vmid)?.drives.length) {
    if (sizeBytes !== undefined) await growHeld(c, node, made, sizeBytes, await digest());
    await run(c, { op: 'detach', node, vmid: made.vmid, digest: await digest() });
  }
  const f = helperFacts((await view(c, node)).host, made.vmid);
  const key = f?.entries.find((e) => e.key.startsWith('unused') && e.value === made.volid)?.key;
  if (key) {
    const [storage = '', disk = ''] = made.volid.split(':');
    const placeholder = `${storage}:vm-${made.vmid}-${RELEASED}-${disk.slice(`vm-${made.vmid}-`.length)}`;
    await run(c, { op: 'release', node, vmid: made.vmid, key, placeholder, digest: await digest() });
  }
  c.log('restored disk released by its volume VM', { volid: made.volid, vmid: made.vmid });
  return made;
}

/** The helper VM's config digest, read now. */
export async function digestOf(c: CopyContext, node: string, vmid: number): Promise<string> {
  return helperFacts((await view(c, node)).host, vmid)?.entries.find((e) => e.key === 'digest')?.value ?? '';
}

/** Grows the clone its volume VM holds as scsi0 to `sizeBytes`, unless it is that large already. */
export async function growHeld(
  c: CopyContext,
  node: string,
  made: { vmid: number; volid: string },
  sizeBytes: number,
  digest: string,
): Promise<void> {
  const storage = made.volid.split(':')[0] ?? '';
  const sizeNow = async () =>
    (await c.cluster.api.listContent(node, storage, made.vmid, { signal: c.signal })).find(
      (i) => i.volid === made.volid,
    )?.size ?? 0;
  const from = await sizeNow();
  if (from >= sizeBytes) return;
  const t0 = Date.now();
  await run(c, { op: 'grow', node, vmid: made.vmid, size: `${Math.ceil(sizeBytes / MiB)}M`, digest });
  c.log('restored disk grown to the requested size', { volid: made.volid, from, to: sizeBytes, ms: Date.now() - t0 });
}
