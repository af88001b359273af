// CreateSnapshot, DeleteSnapshot and ListSnapshots for Proxmox disks (docs/snapshots.md): a
// snapshot is the linked clone of the source's thin snapshot, kept in a stopped snapshot VM of
// ours. Its handle has the volume-handle form `region/zone/storage/vm-<snapshot VM>-disk-0`; a
// proxmox-csi-plugin snapshot (`region/zone/storage/vm-<controller>-<name>`, a plain copy) has the
// same form and is restored and deleted like a volume.
import type * as T from '../../../csi/types.js';
import { AlreadyExists, InvalidArgument, NotFound } from '../../../errors.js';
import type { VmResource } from '../../api/api.js';
import {
  type ControllerHandler,
  type Core,
  foundVolume,
  requireSnapshots,
  requireVolume,
  resolveVolume,
} from '../core.js';
import { findHelper, linkedCopy } from '../copy/thin-copy.js';
import { COPY_VM_NAMES, type CopyRecord, type HelperFacts, helperFacts, parseRecord } from '../safety/copy-vms.js';
import { decideCopyStep, must } from '../safety/ownership.js';
import { readFresh } from '../safety/fresh-read.js';
import { waitTask } from '../../api/tasks.js';
import { diskOwner, formatVolumeId, parseVolid } from '../../volume-id.js';
import { decodeToken, encodeToken } from './list.js';
import { deleteVolume } from './volumes.js';
import { copyContext } from './copy-context.js';

const timestamp = (sec: number) => ({ seconds: String(sec), nanos: 0 });

function snapshotOf(region: string, node: string, volid: string, record: CopyRecord, size: number): T.CsiSnapshot {
  const ref = parseVolid(volid);
  return {
    snapshotId: formatVolumeId({ region, zone: node, storage: ref?.storage ?? '', disk: ref?.disk ?? '' }),
    sourceVolumeId: record.source,
    creationTime: timestamp(record.created),
    sizeBytes: String(size),
    // The clone exists and its VM is unlocked (findHelper's rules): it can be restored now.
    readyToUse: true,
  };
}

export const createSnapshot: ControllerHandler<'createSnapshot'> = async (core, req, ctx) => {
  const v = requireVolume(core, req.sourceVolumeId);
  return v.cluster.exclusive(`snapshot:${req.name}`, async () => {
    const found = await foundVolume(v, req.sourceVolumeId, ctx.signal);
    await requireSnapshots(v, 'a snapshot', ctx.signal);
    const c = copyContext(core, v.cluster, ctx);
    const existing = await findHelper(c, found.node, 'snapshot', req.name);
    if (existing?.record && existing.record.source !== req.sourceVolumeId)
      throw new AlreadyExists(
        `snapshot ${req.name} already exists for volume ${existing.record.source}, not ${req.sourceVolumeId}`,
      );
    const t0 = Date.now();
    const made = await linkedCopy(
      c,
      { node: found.node, volid: v.volid, source: req.sourceVolumeId, name: req.name },
      'snapshot',
    );
    const record = (await findHelper(c, found.node, 'snapshot', req.name))?.record;
    if (!record) throw new NotFound(`snapshot VM ${made.vmid} vanished after it was made`);
    ctx.log.info({ snapshot: made.volid, source: v.volid, ms: Date.now() - t0 }, 'snapshot made (thin, linked clone)');
    return { snapshot: snapshotOf(v.cluster.region, found.node, made.volid, record, found.item.size) };
  });
};

// What proxmox-csi-plugin's CreateSnapshot named its copies: vm-<controller>-<CSI snapshot name>,
// and the external-snapshotter names a snapshot `snapshot-<VolumeSnapshot uid>`.
const LEGACY_SNAPSHOT_RE = /^snapshot-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Whether a disk of the controller VMID has the name a proxmox-csi-plugin snapshot has. */
export const isLegacySnapshotDisk = (disk: string, controllerVmId: number): boolean =>
  disk.startsWith(`vm-${String(controllerVmId)}-`) &&
  LEGACY_SNAPSHOT_RE.test(disk.slice(`vm-${String(controllerVmId)}-`.length));

/** The snapshot id a snapshot VM issued: its host, and the storage and disk of its clone (scsi0). */
function issuedSnapshotId(region: string, f: HelperFacts): string | undefined {
  const ref = parseVolid(f.drives.find((d) => d.key === 'scsi0')?.volid ?? '');
  return ref ? formatVolumeId({ region, zone: f.vm.node, storage: ref.storage, disk: ref.disk }) : undefined;
}

/**
 * DeleteSnapshot acts only on an id it issued, spelled exactly (docs/ownership.md, "Ids"): a
 * snapshot VM of ours whose host and clone make that id, or a proxmox-csi-plugin snapshot disk
 * (`vm-<controller>-snapshot-<uid>`, freed like a volume). Any other id — a live claim's disk,
 * another zone, storage or disk number, a VM that is not our snapshot VM — is an unknown one:
 * OK, and nothing changes (CSI DeleteSnapshot).
 */
export const deleteSnapshot: ControllerHandler<'deleteSnapshot'> = async (core, req, ctx) => {
  const v = resolveVolume(core, req.snapshotId);
  const owner = v ? diskOwner(v.ref.disk) : undefined;
  const unknown = (why: string) => {
    ctx.log.info({ snapshot: req.snapshotId }, `not a snapshot this driver issued (${why}); nothing to delete`);
    return {};
  };
  if (!v || owner === undefined) return unknown('not a handle of a configured region');
  if (owner === core.controllerVmId) {
    if (!isLegacySnapshotDisk(v.ref.disk, core.controllerVmId)) return unknown('a volume, not a snapshot');
    await deleteVolume(core, { volumeId: req.snapshotId, secrets: {} }, ctx);
    return {};
  }
  const { cluster } = v;
  return cluster.exclusive(`snapshot-vm:${String(owner)}`, async () => {
    const all = await cluster.api.vmResources({ signal: ctx.signal });
    const vm = all.find((r) => r.vmid === owner);
    if (vm?.name !== COPY_VM_NAMES.snapshot) return unknown('no snapshot VM of that VMID');
    const host = await readFresh(cluster, [vm.node], ctx.signal);
    const f = helperFacts(host, vm.vmid);
    const ours = f?.record?.role === 'snapshot' && f.record.controller === core.controllerVmId;
    if (!f || !ours || issuedSnapshotId(cluster.region, f) !== req.snapshotId) return unknown('another spelling');
    const view = { host, vmids: new Set(all.map((r) => r.vmid)), controllerVmId: core.controllerVmId };
    const permit = must(decideCopyStep({ op: 'destroy', node: vm.node, vmid: vm.vmid }, view));
    const upid = await cluster.port.copyStep(permit, { signal: ctx.signal });
    await waitTask(cluster.api, vm.node, upid, { cluster: cluster.region, what: `delete snapshot VM ${vm.vmid}` });
    ctx.log.info({ snapshot: req.snapshotId, vmid: vm.vmid }, 'snapshot deleted');
    return {};
  });
};

/** Every snapshot VM of ours, with its record and clone. */
async function listAll(core: Core, ctx: T.CallContext): Promise<T.CsiSnapshot[]> {
  const out: T.CsiSnapshot[] = [];
  for (const cluster of core.clusters.values()) {
    const vms = (await cluster.api.vmResources({ signal: ctx.signal })).filter(
      (r: VmResource) => r.type === 'qemu' && r.name === COPY_VM_NAMES.snapshot,
    );
    for (const vm of vms) {
      const conf = await cluster.api.vmConfig(vm.node, vm.vmid, { signal: ctx.signal }).catch(() => undefined);
      const record = parseRecord(conf?.values.description);
      const disk = conf?.values.scsi0?.split(',')[0];
      const ref = disk ? parseVolid(disk) : undefined;
      if (!record || record.role !== 'snapshot' || record.controller !== core.controllerVmId || !disk || !ref) continue;
      const items = await cluster.api
        .listContent(vm.node, ref.storage, vm.vmid, { signal: ctx.signal })
        .catch(() => []);
      const size = items.find((i) => i.volid === disk)?.size ?? 0;
      out.push(snapshotOf(cluster.region, vm.node, disk, record, size));
    }
  }
  const id = (x: T.CsiSnapshot) => x.snapshotId ?? '';
  return out.sort((a, b) => (id(a) < id(b) ? -1 : id(a) > id(b) ? 1 : 0));
}

export const listSnapshots: ControllerHandler<'listSnapshots'> = async (core, req, ctx) => {
  let all = await listAll(core, ctx);
  if (req.snapshotId) all = all.filter((s) => s.snapshotId === req.snapshotId);
  if (req.sourceVolumeId) all = all.filter((s) => s.sourceVolumeId === req.sourceVolumeId);
  let start = 0;
  if (req.startingToken) {
    const after = decodeToken(req.startingToken);
    if (after === undefined)
      throw new InvalidArgument(`starting_token "${req.startingToken}" is not one this driver issued`);
    start = all.findIndex((s) => (s.snapshotId ?? '') > after);
    if (start < 0) start = all.length;
  }
  const max = req.maxEntries > 0 ? req.maxEntries : all.length;
  const page = all.slice(start, start + max);
  const last = page.at(-1);
  const more = start + max < all.length && last?.snapshotId;
  return { entries: page.map((snapshot) => ({ snapshot })), nextToken: more ? encodeToken(last.snapshotId ?? '') : '' };
};
