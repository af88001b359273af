// From the facts to what `report` says, and to what `--fix` may do. Pure: no I/O, so every rule
// is a unit test away. The rule for a fix is proof, not likelihood:
//   - an orphaned disk is freed only when its name is exactly the driver's (vm-<ctrl>-pvc-<uid>,
//     or a VolumeAttributesClass marker of one), no PV in any state names it, no VM config
//     references it (current, pending, unusedN, any bus; helper attachments and foreign unusedN
//     excepted, which the driver's DeleteVolume removes first), and the storage says it was
//     created longer ago than the grace period (a CreateVolume in flight allocates the disk
//     before the provisioner creates its PV; a disk without a creation time is never freed);
//   - an unusedN entry of a driver disk is dropped only on a VM that neither owns the disk (there
//     Proxmox would free the disk itself) nor has it on a drive;
//   - a helper attachment is unlinked only when no expansion can be running: no PV, or its claim
//     shows no controller resize in progress;
//   - an orphaned disk is freed only from a view that can be the cluster that owns the disks:
//     it has a PV of this Proxmox cluster, no driver disk sits on a VM's drive without a PV
//     naming it, and the disk is younger than the cluster (its kube-system Namespace);
//   - an NFS claim directory: nfs-findings.ts and ownership.ts (docs/ownership-day2.md).
// Everything else is reported only.
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '../../k8s/index.js';
import { isHelperSite } from '../../proxmox/controller/state/drives.js';
import { parseMarker } from '../../proxmox/controller/params/mutable.js';
import { type DiskUse, useIndex } from '../../proxmox/controller/state/scan.js';
import { diskOwner, formatVolumeId, parseVolumeId, type VolumeRef } from '../../proxmox/volume-id.js';
import { PROXMOX_DRIVER, type ClusterFacts, type DiskFact, type KubeFacts } from './facts.js';
import { helperFindings } from './helper-findings.js';
import type { Finding, Kind } from './finding.js';

export type { Action, Finding, Kind } from './finding.js';

/**
 * What each kind is to an operator, and so which alert of the chart's PrometheusRule fires on it
 * (the findings metric counts every kind): information (none), a leftover (PveCsiLeftovers), a
 * volume whose backing is gone or held outside Kubernetes (PveCsiVolumeBackingMismatch), a stuck
 * pending change (PveCsiPendingChangeStuck), or a failed read (PveCsiFindingsStale). A Record, so
 * a new kind does not compile until it is placed; test/helm/observability.test.ts holds the
 * chart's alerts to this table.
 */
export const KIND_CLASS: Readonly<Record<Kind, 'info' | 'leftover' | 'volume' | 'pending' | 'error'>> = {
  archive: 'info',
  'retained-dir': 'info',
  snapshot: 'info',
  'nfs-snapshot': 'info',
  'upstream-snapshot': 'info',
  'orphan-disk': 'leftover',
  'orphan-dir': 'leftover',
  'unused-entry': 'leftover',
  'helper-attachment': 'leftover',
  'helper-vm': 'leftover',
  'partial-snapshot': 'leftover',
  'restore-marker': 'leftover',
  'attached-without-attachment': 'volume',
  'pv-missing-disk': 'volume',
  'pv-missing-dir': 'volume',
  'pending-delete': 'pending',
  error: 'error',
};

/** Kinds that are information, not problems: they do not make the exit code 1. */
export const INFO_KINDS: ReadonlySet<Kind> = new Set(
  (Object.keys(KIND_CLASS) as Kind[]).filter((k) => KIND_CLASS[k] === 'info'),
);

export interface Rules {
  controllerVmId: number;
  graceMs: number;
  now: number;
}

const UID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';

/**
 * vm-<ctrl>-pvc-<uid>: a disk the driver (or upstream) created for a provisioned PV; on a file
 * storage `<ctrl>/vm-<ctrl>-pvc-<uid>.<raw|qcow2>` (src/proxmox/storage/file.ts).
 */
export function isProvisionerDisk(disk: string, controllerVmId: number): boolean {
  const id = String(controllerVmId);
  return (
    new RegExp(`^vm-${id}-pvc-${UID}$`).test(disk) ||
    new RegExp(`^${id}/vm-${id}-pvc-${UID}\\.(?:raw|qcow2)$`).test(disk)
  );
}

function pvcOf(pv: V1PersistentVolume, pvcs: readonly V1PersistentVolumeClaim[]): V1PersistentVolumeClaim | undefined {
  const ref = pv.spec?.claimRef;
  return ref ? pvcs.find((c) => c.metadata?.namespace === ref.namespace && c.metadata?.name === ref.name) : undefined;
}

function resizing(pvc: V1PersistentVolumeClaim | undefined): boolean {
  if (!pvc) return false;
  const statuses = Object.values(pvc.status?.allocatedResourceStatuses ?? {});
  if (statuses.some((s) => s === 'ControllerResizeInProgress' || s === 'ControllerResizeInfeasible')) return true;
  return (pvc.status?.conditions ?? []).some((c) => c.type === 'Resizing' && c.status === 'True');
}

/**
 * Why this Kubernetes view cannot be the cluster that owns the disks of this Proxmox cluster, if
 * it cannot: it has none of the driver's PVs there while the driver has disks there (another or
 * a rebuilt cluster's kubeconfig), or a driver disk sits on a VM's SCSI drive with no PV of this
 * view naming it (the cluster using it is another one).
 */
function foreignView(
  f: ClusterFacts,
  pvByDisk: ReadonlyMap<string, unknown>,
  usesOf: (storage: string, disk: string) => DiskUse,
): string | undefined {
  if (f.disks.length > 0 && pvByDisk.size === 0)
    return `this cluster has no PersistentVolume of ${PROXMOX_DRIVER} in region ${f.region}: the kubeconfig may be another or a rebuilt cluster's, which would take every disk for an orphan`;
  for (const d of f.disks) {
    const base = parseMarker(d.disk)?.disk ?? d.disk;
    if (pvByDisk.has(`${d.storage}:${base}`)) continue;
    const on = usesOf(d.storage, d.disk).sites.find((s) => !isHelperSite(s.site) && s.site.placement !== 'detaching');
    if (on)
      return `${d.volid} is on ${on.site.key} of VM ${on.vm.name} (${on.vm.vmid}) but no PersistentVolume of this cluster names it: this view is not the cluster that uses the driver's disks`;
  }
  return undefined;
}

/** Why a disk or directory older than this cluster is not its leftover. */
export function bornBefore(birth: number | undefined): string {
  return birth === undefined
    ? "this cluster's age is unknown (Namespace kube-system cannot be read): what predates it cannot be ruled out"
    : `older than this cluster (Namespace kube-system created ${new Date(birth).toISOString()}): not a leftover of it`;
}

export function proxmoxFindings(f: ClusterFacts, k: KubeFacts, r: Rules): Finding[] {
  const out: Finding[] = [];
  const pvByDisk = new Map<string, { pv: V1PersistentVolume; ref: VolumeRef; handle: string }>();
  for (const pv of k.pvs) {
    if (pv.spec?.csi?.driver !== PROXMOX_DRIVER) continue;
    const handle = pv.spec.csi.volumeHandle;
    const ref = parseVolumeId(handle);
    if (ref && ref.region === f.region) pvByDisk.set(`${ref.storage}:${ref.disk}`, { pv, ref, handle });
  }
  const attachments = new Set(
    k.attachments.flatMap((a) =>
      a.spec.attacher === PROXMOX_DRIVER && a.spec.source.persistentVolumeName
        ? [`${a.spec.source.persistentVolumeName}\u0000${a.spec.nodeName}`]
        : [],
    ),
  );
  const present = new Set(f.disks.map((d) => d.volid));
  const where = (d: DiskFact) => `${f.region}/${d.shared ? '(shared)' : d.node}`;
  const usesOf = useIndex(f.scan);
  const foreign = foreignView(f, pvByDisk, usesOf);

  for (const d of f.disks) {
    const marker = parseMarker(d.disk);
    const base = marker?.disk ?? d.disk;
    const known = pvByDisk.get(`${d.storage}:${base}`);
    const pv = known?.pv;
    const use = usesOf(d.storage, d.disk);
    const owner = diskOwner(d.disk);
    const age = d.createdAt !== undefined ? r.now - d.createdAt : undefined;

    for (const { vm, site } of use.sites) {
      const at = `${f.region}/${vm.name} (${vm.vmid})`;
      if (isHelperSite(site)) {
        const claim = pv ? pvcOf(pv, k.pvcs) : undefined;
        const busy = resizing(claim);
        out.push({
          kind: 'helper-attachment',
          where: at,
          what: `${site.key}: ${d.volid}`,
          detail: `left by an interrupted offline expansion${pv ? ` of PV ${pv.metadata?.name}` : ''}`,
          ...(known && !busy
            ? { action: { type: 'unlink-helpers', region: f.region, volumeId: known.handle } }
            : busy
              ? { kept: `claim ${claim?.metadata?.namespace}/${claim?.metadata?.name} is being resized` }
              : { kept: 'its disk is orphaned: removed when that is freed' }),
        });
      } else if (site.placement === 'detaching') {
        out.push({
          kind: 'pending-delete',
          where: at,
          what: `${site.key}: ${d.volid}`,
          detail:
            "the detach is pending in the VM config (hot-unplug did not complete); backups of this VM fail until it clears (VM restart, or the driver's next ControllerUnpublishVolume)",
          kept: 'the guest may still use the disk',
        });
      } else if (pv && !attachments.has(`${pv.metadata?.name}\u0000${vm.name}`)) {
        out.push({
          kind: 'attached-without-attachment',
          where: at,
          what: `${site.key}: ${d.volid}`,
          detail: `PV ${pv.metadata?.name} has no VolumeAttachment for node ${vm.name}`,
          kept: 'a pod may be using it',
        });
      }
    }
    for (const u of use.unused) {
      const at = `${f.region}/${u.vm.name} (${u.vm.vmid})`;
      const onDrive = use.sites.some((s) => s.vm.vmid === u.vm.vmid);
      const finding: Finding = {
        kind: 'unused-entry',
        where: at,
        what: `${u.key}: ${d.volid}`,
        detail: "an unusedN entry of a driver disk; it breaks this VM's backups once the disk is gone",
      };
      if (u.vm.vmid === owner) finding.kept = `VM ${u.vm.vmid} owns the disk: deleting the entry would free the disk`;
      else if (onDrive) finding.kept = 'the VM also has the disk on a drive';
      else if (!pv) finding.kept = 'its disk is orphaned: removed when that is freed';
      else
        finding.action = {
          type: 'drop-unused',
          region: f.region,
          vm: { vmid: u.vm.vmid, node: u.vm.node, name: u.vm.name },
          storage: d.storage,
          disk: d.disk,
        };
      out.push(finding);
    }

    if (pv) continue;
    // A marker of a disk that still exists belongs to that disk: freed with it, never alone.
    if (marker && present.has(`${d.storage}:${base}`)) continue;
    const finding: Finding = {
      kind: 'orphan-disk',
      where: where(d),
      what: d.volid,
      sizeBytes: d.size,
      detail: marker
        ? `VolumeAttributesClass marker of ${base}, which is gone`
        : "named by the driver's scheme; no PersistentVolume names it",
      ...(age !== undefined && { ageMs: age }),
    };
    const blocking = [
      ...use.sites
        .filter((s) => !isHelperSite(s.site))
        .map((s) => `${s.site.placement} as ${s.site.key} of VM ${s.vm.name} (${s.vm.vmid})`),
      ...use.unused.filter((u) => u.vm.vmid === owner).map((u) => `${u.key} of its owner VM ${u.vm.vmid}`),
      ...use.otherBus.map((o) => `${o.key} of VM ${o.vm.name} (${o.vm.vmid})`),
    ];
    if (!isProvisionerDisk(base, r.controllerVmId))
      finding.kept = `not a provisioned name (vm-${r.controllerVmId}-pvc-<uid>)`;
    else if (blocking.length) finding.kept = `still referenced: ${blocking.join('; ')}`;
    else if (age === undefined)
      finding.kept = 'the storage reports no creation time, so an in-flight CreateVolume cannot be ruled out';
    else if (age < r.graceMs)
      finding.kept = `younger than the grace period (${Math.round(r.graceMs / 1000)} s): may be a CreateVolume in flight`;
    else if (foreign) finding.kept = foreign;
    else if (d.createdAt !== undefined && (k.birth === undefined || d.createdAt < k.birth))
      finding.kept = bornBefore(k.birth);
    else if (marker)
      finding.action = {
        type: 'free-marker',
        region: f.region,
        node: d.node,
        storage: d.storage,
        volid: d.volid,
        ...(d.shared && { shared: true }),
      };
    else
      finding.action = {
        type: 'delete-volume',
        region: f.region,
        volumeId: formatVolumeId({ region: f.region, zone: d.shared ? '' : d.node, storage: d.storage, disk: d.disk }),
      };
    out.push(finding);
  }

  for (const { pv, ref } of pvByDisk.values()) {
    const listedHere = f.storages.some((s) => s.storage === ref.storage && (ref.zone === '' || s.node === ref.zone));
    const unknown = f.unlisted.some((u) => u.storage === ref.storage && (ref.zone === '' || u.node === ref.zone));
    if (unknown) continue;
    // A restored or cloned volume is owned by its volume VM, not the controller VMID (helper-vms.ts).
    const restored = (f.helpers ?? []).some(
      (h) =>
        (ref.zone === '' || h.vm.node === ref.zone) &&
        h.owned?.some((d) => d.storage === ref.storage && d.disk === ref.disk),
    );
    const found =
      restored ||
      f.disks.some(
        (d) => d.storage === ref.storage && d.disk === ref.disk && (ref.zone === '' || d.shared || d.node === ref.zone),
      );
    if (found) continue;
    out.push({
      kind: 'pv-missing-disk',
      where: `${f.region}/${ref.zone || '(shared)'}`,
      what: `PV ${pv.metadata?.name}`,
      detail: listedHere
        ? `${ref.storage}:${ref.disk} does not exist (PV phase ${pv.status?.phase ?? '?'})`
        : `storage ${ref.storage} is not on ${ref.zone || 'any node'}`,
    });
  }
  out.push(
    ...helperFindings(f, {
      now: r.now,
      graceMs: r.graceMs,
      claimed: (storage, disk) => pvByDisk.has(`${storage}:${disk}`),
      viewProblem: (createdAt) =>
        pvByDisk.size === 0
          ? `this cluster has no PersistentVolume of ${PROXMOX_DRIVER} in region ${f.region}: the kubeconfig may be another or a rebuilt cluster's, which would take every restored volume for an orphan`
          : (foreign ?? (k.birth === undefined || createdAt < k.birth ? bornBefore(k.birth) : undefined)),
    }),
  );
  for (const u of f.unlisted)
    out.push({
      kind: 'error',
      where: `${f.region}/${u.node}`,
      what: `storage ${u.storage}`,
      detail: `cannot list: ${u.error}`,
    });
  return out;
}
