// The snapshot, restore and clone half of the Proxmox ownership search (docs/ownership.md,
// "Snapshots, restores and clones"): generated clusters gain VMs that look like the driver's
// helper VMs but are not (a helper's name without our record, a record of another controller, a
// VMID of the helper range that is someone else's), a helper of ours left by an earlier run, and
// disks of proxmox-csi-plugin's snapshot form; generated steps gain CreateSnapshot,
// DeleteSnapshot, ListSnapshots and CreateVolume from a snapshot or a volume over handles naming
// any of those, or what an earlier step made. The rules below are written from docs/ownership.md
// and docs/snapshots.md, independently of src/proxmox/controller/safety/copy-vms.ts.
import fc from 'fast-check';
import type * as T from '../../src/csi/types.js';
import type { ProxmoxController } from '../../src/proxmox/controller/controller.js';
import { callCtx, createReq, preferZone } from './csi-requests.js';
import { kindOf } from './outcome.js';
import {
  CTRL,
  type ClusterPicture,
  STORAGE,
  type VmPicture,
  driverDisk,
  handleOf,
  ownerOf,
} from './proxmox-ownership.js';

export const HELPER_NAMES = {
  copy: 'pve-nfs-csi-copy',
  snapshot: 'pve-nfs-csi-snapshot',
  volume: 'pve-nfs-csi-volume',
};
type Role = keyof typeof HELPER_NAMES;
const PREFIX = 'pve-nfs-csi thin copy ';

export const record = (role: Role, controller: number, name: string, source: string): string =>
  PREFIX + JSON.stringify({ role, controller, name, source, created: 1_700_000_000 });

/**
 * VMs a generated cluster may hold next to the workers: look-alikes that are not ours, one VM of
 * the helper range that is an ordinary VM, and one snapshot VM of ours left by an earlier run.
 */
// Literals, not CTRL and handleOf: proxmox-ownership.ts imports this module, so its values are
// not initialised yet while this one's top level runs.
const PVC_A = 'homelab/hyper1/local-lvm/vm-9999-pvc-a';
export const COPY_VMS: Array<{ vmid: number; name: string; description?: string }> = [
  { vmid: 800000123, name: HELPER_NAMES.snapshot },
  { vmid: 800000124, name: HELPER_NAMES.snapshot, description: record('snapshot', 7777, 'snap-a', 'x') },
  {
    vmid: 800000125,
    name: HELPER_NAMES.copy,
    description: record('volume', 9999, 'pvc-r1', PVC_A),
  },
  { vmid: 850000000, name: 'talos-worker-9' },
  {
    vmid: 800000126,
    name: HELPER_NAMES.snapshot,
    description: record('snapshot', 9999, 'snap-old', PVC_A),
  },
];
/**
 * Disks of proxmox-csi-plugin's snapshot form (`vm-<ctl>-snapshot-<uid>`), one of the driver's
 * scheme that only looks like it (not a snapshotter's name), and one of a worker's.
 */
export const COPY_DISKS = [
  'vm-9999-snapshot-6f0a4c1e-2b3d-4e5f-8a9b-0c1d2e3f4a51',
  'vm-9999-snapshot-x',
  'vm-101-snapshot-x',
];

/** A helper VM of this driver, by its name, record and VMID range (docs/ownership.md). */
export function ourHelper(vm: Pick<VmPicture, 'vmid' | 'name' | 'config'>): { role: Role; name: string } | undefined {
  if (vm.vmid < 800_000_000 || vm.vmid >= 900_000_000) return undefined;
  const d = vm.config.description;
  if (!d?.startsWith(PREFIX)) return undefined;
  try {
    const r = JSON.parse(d.slice(PREFIX.length)) as { role?: Role; controller?: number; name?: string };
    if (!r.role || r.controller !== CTRL || HELPER_NAMES[r.role] !== vm.name || typeof r.name !== 'string')
      return undefined;
    return { role: r.role, name: r.name };
  } catch {
    return undefined;
  }
}

/**
 * The disk a helper VM issued an id for: a snapshot VM's clone (scsi0), a volume VM's released
 * disk (its placeholder `vm-<R>-pve-nfs-csi-released-<tail>` stands for `vm-<R>-<tail>`).
 */
export function issuedDiskOf(vm: Pick<VmPicture, 'vmid' | 'config'>): string | undefined {
  for (const [k, v] of Object.entries(vm.config)) {
    const disk = /^[^:]+:([^,]+)/.exec(v)?.[1] ?? '';
    if (k === 'scsi0') return disk;
    const m = /^vm-(\d+)-pve-nfs-csi-released-(.+)$/.exec(disk);
    if (k.startsWith('unused') && m) return `vm-${m[1] ?? ''}-${m[2] ?? ''}`;
  }
  return undefined;
}

// ---- generated steps ----

export type CopyOp =
  | { kind: 'snapshot'; name: string; source: string; handle?: string }
  | { kind: 'deleteSnapshot'; id: string; handle?: string }
  | { kind: 'listSnapshots'; source: string }
  | { kind: 'restore'; name: string; from: string; zone: string; handle?: string }
  | { kind: 'clone'; name: string; from: string; zone: string; handle?: string };

/** Where a restore or clone is asked for: the source's host (thin) or another one (migrated). */
export const COPY_ZONES = ['hyper1', 'hyper2'];

/** `made:<name>`: the handle an earlier step of this case got back for that name. */
const madeRef = (name: string) => `made:${name}`;
const SNAP_NAMES = ['snap-a', 'snap-b', 'snap-old'];
const VOL_NAMES = ['pvc-r1', 'pvc-r2'];
/** Snapshot handles: ours, made or stale, look-alikes, the helper range, proxmox-csi-plugin's form. */
const snapshotIds = [
  ...SNAP_NAMES.map(madeRef),
  'vm-800000123-disk-0',
  'vm-800000124-disk-0',
  'vm-800000125-disk-0',
  'vm-800000126-disk-0',
  'vm-850000000-disk-0',
  'vm-800000001-disk-0',
  ...COPY_DISKS,
  'vm-101-disk-1',
  'vm-101-disk-0',
];
const volumeIds = ['vm-9999-pvc-a', 'vm-9999-pvc-b', 'vm-9999-disk-5', 'vm-101-disk-1', ...VOL_NAMES.map(madeRef)];

// Half of the snapshot and restore steps take the path that works (pvc-a, what a step made), so
// sequences reach restores of made snapshots and deletes of made volumes; the rest is hostile.
const biased = (good: string, rest: string[]) =>
  fc.oneof({ weight: 1, arbitrary: fc.constant(good) }, { weight: 1, arbitrary: fc.constantFrom(...rest) });
export const copyOpArb: fc.Arbitrary<CopyOp> = fc.oneof(
  fc.record({
    kind: fc.constant('snapshot' as const),
    name: biased('snap-a', SNAP_NAMES),
    source: biased('vm-9999-pvc-a', [...volumeIds, 'vm-850000000-disk-0', 'vm-800000123-disk-0']),
  }),
  fc.record({ kind: fc.constant('deleteSnapshot' as const), id: fc.constantFrom(...snapshotIds) }),
  fc.record({ kind: fc.constant('listSnapshots' as const), source: fc.constantFrom('', ...volumeIds) }),
  fc.record({
    kind: fc.constant('restore' as const),
    name: fc.constantFrom(...VOL_NAMES),
    from: biased('made:snap-a', snapshotIds),
    zone: fc.constantFrom(...COPY_ZONES),
  }),
  fc.record({
    kind: fc.constant('clone' as const),
    name: fc.constantFrom(...VOL_NAMES),
    from: fc.constantFrom(...volumeIds),
    zone: fc.constantFrom(...COPY_ZONES),
  }),
);

/** Handles an earlier step made, by name (snapshots and restored volumes). */
export type Made = Map<string, string>;

/** A generated disk or `made:` reference as a handle (a stale guess when nothing was made). */
export const resolve = (made: Made, ref: string): string =>
  ref.startsWith('made:') ? (made.get(ref.slice(5)) ?? handleOf('vm-800000002-disk-0')) : handleOf(ref);

/** The disk a handle names (`…/vm-N-disk-0`), for the invariant. */
export const diskOfHandle = (h: string): string => h.split('/')[3] ?? '';

type CopyCalls = Required<
  Pick<ProxmoxController, 'createSnapshot' | 'deleteSnapshot' | 'listSnapshots' | 'createVolume'>
>;

/** One copy call; the handle it got back is remembered under its name. */
export async function callCopyOp(c: CopyCalls, op: CopyOp, made: Made, ms: number): Promise<string> {
  const ctx = callCtx(ms);
  switch (op.kind) {
    case 'snapshot': {
      const p = c.createSnapshot(
        { name: op.name, sourceVolumeId: op.handle ?? resolve(made, op.source), secrets: {}, parameters: {} },
        ctx,
      );
      const id = await p.then((r) => r.snapshot?.snapshotId).catch(() => undefined);
      if (id) made.set(op.name, id);
      return kindOf(p);
    }
    case 'deleteSnapshot':
      return kindOf(c.deleteSnapshot({ snapshotId: op.handle ?? resolve(made, op.id), secrets: {} }, ctx));
    case 'listSnapshots':
      return kindOf(
        c.listSnapshots(
          {
            maxEntries: 0,
            startingToken: '',
            sourceVolumeId: op.source ? resolve(made, op.source) : '',
            snapshotId: '',
            secrets: {},
          },
          ctx,
        ),
      );
    case 'restore':
    case 'clone': {
      const from = op.handle ?? resolve(made, op.from);
      const source: T.CreateVolumeRequest['volumeContentSource'] =
        op.kind === 'restore' ? { snapshot: { snapshotId: from } } : { volume: { volumeId: from } };
      const p = c.createVolume(
        createReq(op.name, { volumeContentSource: source, accessibilityRequirements: preferZone(op.zone) }),
        ctx,
      );
      const id = await p.then((r) => r.volume?.volumeId).catch(() => undefined);
      if (id) made.set(op.name, id);
      return kindOf(p);
    }
  }
}

// ---- the invariant ----

/** A mutating Proxmox request the simulator saw during the step. */
export interface SentRequest {
  method: string;
  path: string;
  route: string;
  params: Record<string, string>;
}

/** What the port was given during the step: one entry per permit (its kind and body). */
export interface PermitSeen {
  kind: string;
  body: Record<string, unknown>;
}

const diskOfValue = (value: string): string | undefined => {
  const first = value.split(',')[0] ?? '';
  return first.startsWith(`${STORAGE}:`) ? first.slice(STORAGE.length + 1) : undefined;
};
const DRIVE_RE = /^(?:ide|sata|scsi|virtio|efidisk|tpmstate|unused)\d+$|^vmstate$/;
const isCopyMaking = (op: { kind: string }) => op.kind === 'snapshot' || op.kind === 'restore' || op.kind === 'clone';

/**
 * The helper VMs of ours in either picture (by VMID), and the volumes they own: the base
 * invariant (proxmox-ownership.ts) leaves those to the rules here.
 */
export function helpersOf(before: ClusterPicture, after: ClusterPicture): Map<number, { role: Role; name: string }> {
  const h = new Map<number, { role: Role; name: string }>();
  for (const vm of [...before.vms, ...after.vms]) {
    const o = ourHelper(vm);
    if (o) h.set(vm.vmid, o);
  }
  return h;
}

/**
 * What a step changed around helper VMs that the documents do not allow. `target`: the disk the
 * step's handle names (a snapshot, a restored volume), `name` the step's CSI name.
 */
export function copyViolations(
  before: ClusterPicture,
  after: ClusterPicture,
  op: { kind: string; name?: string | undefined },
  target: string | undefined,
  faulted: boolean,
  sent: readonly SentRequest[],
  permits: readonly PermitSeen[],
  /** The call was given the id issued for `target` exactly (any other spelling may change nothing). */
  exact = true,
): string[] {
  const bad: string[] = [];
  const helpers = helpersOf(before, after);
  const beforeIds = new Set(before.vms.map((v) => v.vmid));
  const afterIds = new Set(after.vms.map((v) => v.vmid));
  const owner = (disk: string) => helpers.get(ownerOf(disk) ?? -1);
  const ofThisCall = (h: { name: string } | undefined) => isCopyMaking(op) && h?.name === op.name;
  for (const vm of after.vms) {
    if (beforeIds.has(vm.vmid)) continue;
    const h = helpers.get(vm.vmid);
    if (!h || !ofThisCall(h)) bad.push(`VM ${vm.vmid} (${vm.name}) appeared in op ${op.kind}`);
    else if (!faulted && h.role === 'copy') bad.push(`copy VM ${vm.vmid} outlived op ${op.kind}`);
  }
  for (const vm of before.vms) {
    if (afterIds.has(vm.vmid)) continue;
    const h = helpers.get(vm.vmid);
    if (!h) continue; // the base invariant reports it
    const mine = exact && target !== undefined && ownerOf(target) === vm.vmid && issuedDiskOf(vm) === target;
    const ok =
      (op.kind === 'deleteSnapshot' && mine && h.role === 'snapshot') ||
      (op.kind === 'delete' && mine && h.role === 'volume') ||
      (ofThisCall(h) && h.role === 'copy');
    if (!ok) bad.push(`helper VM ${vm.vmid} (${h.role} ${h.name}) destroyed by op ${op.kind}`);
  }
  // On the source's host and on the others: a restore or clone into another zone moves its own
  // volume VM's clone there (freed here by the migration, allocated there), and nothing else.
  // The base invariant judges other disks of the source's host; on the other hosts nothing else appears.
  const sides = [
    { b: before.volumes, a: after.volumes, other: after.elsewhere, onlyHelpers: false },
    {
      b: before.elsewhere ?? new Set<string>(),
      a: after.elsewhere ?? new Set<string>(),
      other: after.volumes,
      onlyHelpers: true,
    },
  ];
  for (const { b, a, other, onlyHelpers } of sides) {
    for (const disk of b.keys()) {
      const h = owner(disk);
      if (!h || a.has(disk)) continue;
      const ok =
        (exact && op.kind === 'deleteSnapshot' && target === disk && h.role === 'snapshot') ||
        (exact && op.kind === 'delete' && target === disk && h.role === 'volume') ||
        (ofThisCall(h) && h.role === 'volume' && !!other?.has(disk));
      if (!ok) bad.push(`freed ${disk} of helper VM ${ownerOf(disk) ?? ''} (op ${op.kind})`);
    }
    for (const disk of a.keys()) {
      if (b.has(disk)) continue;
      const h = owner(disk);
      if (h ? !ofThisCall(h) : onlyHelpers) bad.push(`allocated ${disk} (op ${op.kind})`);
    }
  }
  // Volume snapshots (snap_ LVs): only of the driver's disks or our snapshots' clones, and none
  // outlives the call that made it unless a fault cut that call short.
  const snapsB = before.volumeSnaps ?? new Set<string>();
  for (const s of after.volumeSnaps ?? []) {
    if (snapsB.has(s)) continue;
    const disk = s.split('@')[0] ?? '';
    if (!driverDisk(disk) && owner(disk)?.role !== 'snapshot') bad.push(`snapshotted ${disk} (op ${op.kind})`);
    else if (!faulted) bad.push(`volume snapshot ${s} outlived op ${op.kind}`);
  }
  // What a helper VM of ours references: the driver's disks, its own clone, our snapshots'
  // clones, or the released placeholder; never another VM's disk.
  for (const vm of after.vms) {
    if (!helpers.has(vm.vmid)) continue;
    const sections = [vm.config, vm.pending, ...Object.values(vm.snapshots)];
    for (const s of sections)
      for (const [k, v] of Object.entries(s)) {
        const disk = DRIVE_RE.test(k) ? diskOfValue(v) : undefined;
        if (!disk || driverDisk(disk) || ownerOf(disk) === vm.vmid || disk.includes('-pve-nfs-csi-released-')) continue;
        if (owner(disk)?.role === 'snapshot') continue;
        bad.push(`helper VM ${vm.vmid} holds ${disk} as ${k}`);
      }
  }
  bad.push(...requestViolations(before, helpers, op, sent, permits));
  return bad;
}

const vmidOfPath = (path: string): number | undefined => {
  const m = /\/qemu\/(\d+)/.exec(path);
  return m ? Number(m[1]) : undefined;
};
const numbers = (body: Record<string, unknown>): number[] =>
  ['vmid', 'newid'].map((k) => body[k]).filter((x): x is number => typeof x === 'number');
const volumeOfPath = (path: string): string | undefined => {
  const m = /\/content\/([^/]+)$/.exec(path);
  return m ? decodeURIComponent(m[1] ?? '') : undefined;
};

/**
 * Every mutating request carried a permit (the port saw one naming that VM or volume), and no
 * request of a snapshot, restore or clone touched a VM that is not a helper of ours or gave a
 * copy VM a disk that is neither the driver's nor one of our snapshots (a transient change the
 * after-picture would not show).
 */
function requestViolations(
  before: ClusterPicture,
  helpers: Map<number, { role: Role; name: string }>,
  op: { kind: string; name?: string | undefined },
  sent: readonly SentRequest[],
  permits: readonly PermitSeen[],
): string[] {
  const bad: string[] = [];
  const vmids = new Set(permits.flatMap((p) => numbers(p.body)));
  const volids = new Set(
    permits.flatMap((p) => {
      const b = p.body as { volid?: unknown; req?: { filename?: unknown }; storage?: unknown };
      const out: string[] = [];
      if (typeof b.volid === 'string') out.push(b.volid);
      if (typeof b.req?.filename === 'string' && typeof b.storage === 'string')
        out.push(`${b.storage}:${b.req.filename}`);
      return out;
    }),
  );
  const copyCall = ['snapshot', 'restore', 'clone', 'deleteSnapshot', 'listSnapshots'].includes(op.kind);
  const made = new Set<number>();
  for (const r of sent) {
    const vmid = r.method === 'POST' && /\/qemu$/.test(r.path) ? Number(r.params.vmid) : vmidOfPath(r.path);
    const volume = volumeOfPath(r.path) ?? (r.params.filename ? `${STORAGE}:${r.params.filename}` : undefined);
    const permitted = (vmid !== undefined && vmids.has(vmid)) || (volume !== undefined && volids.has(volume));
    if (!permitted) bad.push(`${r.method} ${r.path} was sent without a permit naming it`);
    if (r.method === 'POST' && /\/qemu$/.test(r.path)) {
      if (before.vms.some((v) => v.vmid === vmid)) bad.push(`created VM ${vmid ?? ''} over an existing one`);
      if (vmid !== undefined && r.params.description?.startsWith(PREFIX)) made.add(vmid);
      continue;
    }
    if (/\/clone$/.test(r.path) && r.params.newid) made.add(Number(r.params.newid));
    if (!copyCall || vmid === undefined) continue;
    if (!helpers.has(vmid) && !made.has(vmid))
      bad.push(`op ${op.kind} sent ${r.method} ${r.path} to VM ${vmid}, not ours`);
    const held = r.params.scsi0 ? diskOfValue(r.params.scsi0) : undefined;
    if (held && !driverDisk(held) && helpers.get(ownerOf(held) ?? -1)?.role !== 'snapshot')
      bad.push(`op ${op.kind} gave VM ${vmid} the disk ${held}`);
  }
  return bad;
}

// ---- clusters ----

export interface CopySpec {
  /** Which of COPY_VMS exist, and whether each runs. */
  vms: Array<{ vmid: number; running: boolean }>;
}

export const copySpecArb: fc.Arbitrary<CopySpec> = fc
  .subarray(COPY_VMS)
  .chain((vms) => fc.tuple(...vms.map((v) => fc.boolean().map((running) => ({ vmid: v.vmid, running })))))
  .map((vms) => ({ vms }));
