// The day-2 decisions of the ownership gate (ownership-day2.ts), one rule at a time: what
// report --fix may free on its own, and what move may do with its helper VM.
import t from 'tap';
import type { ConfigEntry, VmResource } from '../../../../../src/proxmox/api/api.js';
import {
  MOVER_VM_NAME,
  type HelperVm,
  decideFreeLeftover,
  decideMovable,
  decideMoverCreate,
  decideMoverDestroy,
  decideMoverHold,
  decideMoverMigrate,
  decideMoverRelease,
  provenUnclaimed,
  releasedPlaceholder,
} from '../../../../../src/proxmox/controller/safety/ownership-day2.js';
import type { FreshView, SnapshotSection } from '../../../../../src/proxmox/controller/safety/ownership.js';

const DISK = { storage: 'local-lvm', disk: 'vm-9999-pvc-a', controllerVmId: 9999 };
const VOLID = 'local-lvm:vm-9999-pvc-a';
const MARKER = { ...DISK, disk: 'vm-9999-pvc-a+vac1-b0' };

interface VmSpec {
  vmid: number;
  name?: string;
  entries?: ConfigEntry[];
  snapshots?: SnapshotSection[];
}

function view(...vms: VmSpec[]): FreshView {
  const rows: VmResource[] = vms.map((v) => ({
    type: 'qemu',
    vmid: v.vmid,
    name: v.name ?? `vm${v.vmid}`,
    node: 'hyper1',
  }));
  return {
    fresh: true,
    vms: rows,
    entries: vms.map((v, i) => ({ vm: rows[i] as VmResource, entries: v.entries ?? [] })),
    snapshots: new Map(vms.map((v) => [v.vmid, v.snapshots ?? []])),
  };
}

const helper = (h: Partial<HelperVm> = {}): HelperVm => ({
  vmid: 9999,
  node: 'hyper1',
  name: MOVER_VM_NAME,
  status: 'stopped',
  held: [{ key: 'unused0', volid: VOLID }],
  ...h,
});
const proof = (handles: string[] = [], zone?: string) => ({
  region: 'homelab',
  pvHandles: handles.map((handle, i) => ({ pv: `pv-${i}`, handle })),
  ...(zone && { zone }),
});
const reason = (v: { allowed: boolean; refusal?: { reason: string } }) => (v.allowed ? 'allowed' : v.refusal?.reason);

t.test('free a leftover: a driver disk or its marker, referenced nowhere, named by no PV', async (t) => {
  t.equal(reason(decideFreeLeftover(DISK, 'hyper1', view({ vmid: 111 }), proof())), 'allowed');
  t.equal(reason(decideFreeLeftover(MARKER, 'hyper1', view({ vmid: 111 }), proof())), 'allowed', 'a marker of one');
  const allowed = decideFreeLeftover(DISK, 'hyper1', view(), proof());
  t.same(allowed.allowed && allowed.value.body, { node: 'hyper1', storage: 'local-lvm', volid: VOLID });
  for (const disk of ['vm-101-disk-1', 'vm-9999-disk-5', 'vm-5555-disk-0', 'vm-101-disk-1+vac1-b0'])
    t.equal(reason(decideFreeLeftover({ ...DISK, disk }, 'hyper1', view(), proof())), 'not-driver-disk', disk);
  const where: Array<[string, VmSpec]> = [
    ['pending', { vmid: 111, entries: [{ key: 'sata2', pending: `${VOLID},size=1G` }] }],
    ['unusedN', { vmid: 111, entries: [{ key: 'unused3', value: VOLID }] }],
    ['a snapshot section', { vmid: 111, snapshots: [{ name: 'pre', values: { virtio1: `${VOLID},size=1G` } }] }],
    ['a helper attachment', { vmid: 111, entries: [{ key: 'scsi30', value: `${VOLID},wwn=0x5056432d49443330` }] }],
  ];
  for (const [what, vm] of where)
    t.equal(reason(decideFreeLeftover(DISK, 'hyper1', view(vm), proof())), 'referenced', what);
  const marked = { vmid: 111, entries: [{ key: 'scsi5', value: `local-lvm:${MARKER.disk}` }] };
  t.equal(
    reason(decideFreeLeftover(MARKER, 'hyper1', view(marked), proof())),
    'referenced',
    'a marker attached by hand',
  );
  t.equal(
    reason(decideFreeLeftover(MARKER, 'hyper1', view(), proof(['homelab/hyper1/local-lvm/vm-9999-pvc-a']))),
    'claimed',
    'a marker whose disk a PV names',
  );
});

t.test('the PV proof: any spelling of the disk in the region; a zone narrows local storages', async (t) => {
  t.equal(reason(provenUnclaimed(DISK, proof(['homelab//local-lvm/vm-9999-pvc-a']))), 'claimed', 'shared spelling');
  t.equal(reason(provenUnclaimed(DISK, proof(['homelab/hyper2/local-lvm/vm-9999-pvc-a']))), 'claimed', 'any zone');
  t.equal(reason(provenUnclaimed(DISK, proof(['other/hyper1/local-lvm/vm-9999-pvc-a']))), 'allowed', 'another region');
  t.equal(reason(provenUnclaimed(DISK, proof(['homelab/hyper1/local-lvm/vm-9999-pvc-b']))), 'allowed');
  t.equal(
    reason(provenUnclaimed(DISK, proof(['homelab/hyper2/local-lvm/vm-9999-pvc-a'], 'hyper1'))),
    'allowed',
    'the same name on another host is another disk',
  );
  t.equal(reason(provenUnclaimed(DISK, proof(['homelab//local-lvm/vm-9999-pvc-a'], 'hyper1'))), 'claimed');
});

t.test('move: the disk goes into the helper only when nothing references it', async (t) => {
  t.equal(reason(decideMovable(DISK, view({ vmid: 111 }))), 'allowed');
  t.equal(
    reason(decideMovable(DISK, view({ vmid: 111, snapshots: [{ name: 's', values: { scsi3: VOLID } }] }))),
    'referenced',
  );
  t.equal(reason(decideMovable({ ...DISK, disk: 'vm-111-disk-1' }, view())), 'not-driver-disk');
  const created = decideMoverCreate(DISK, 'hyper1', view(), undefined, 'carries it');
  t.same(created.allowed && created.value.body, {
    node: 'hyper1',
    vmid: 9999,
    options: { name: MOVER_VM_NAME, description: 'carries it', unused0: VOLID },
  });
  t.equal(reason(decideMoverCreate(DISK, 'hyper1', view(), helper({ held: [] }), 'x')), 'helper-state');
  const empty = helper({ held: [] });
  t.equal(reason(decideMoverHold(DISK, 'hyper1', view({ vmid: 9999 }), empty)), 'allowed');
  t.equal(reason(decideMoverHold(DISK, 'hyper1', view(), { ...empty, name: 'db' })), 'not-our-helper');
  t.equal(reason(decideMoverHold(DISK, 'hyper1', view(), { ...empty, vmid: 4242 })), 'not-our-helper');
  t.equal(reason(decideMoverHold(DISK, 'hyper2', view(), empty)), 'helper-state', 'on another host');
  t.equal(reason(decideMoverHold(DISK, 'hyper1', view(), helper())), 'helper-state', 'holding something');
});

t.test('move: migrate only the helper holding exactly the disk, and no other VM naming it', async (t) => {
  const own = { vmid: 9999, entries: [{ key: 'unused0', value: VOLID }] };
  t.equal(reason(decideMoverMigrate(DISK, 'hyper2', view(own), helper())), 'allowed');
  const other = { vmid: 111, snapshots: [{ name: 's', values: { scsi3: VOLID } }] };
  t.equal(reason(decideMoverMigrate(DISK, 'hyper2', view(own, other), helper())), 'referenced');
  const two = helper({
    held: [
      { key: 'unused0', volid: VOLID },
      { key: 'unused1', volid: 'local-lvm:vm-9999-pvc-b' },
    ],
  });
  t.equal(reason(decideMoverMigrate(DISK, 'hyper2', view(own), two)), 'helper-state', 'a second volume would travel');
  t.equal(
    reason(decideMoverMigrate(DISK, 'hyper2', view(own), helper({ held: [{ key: 'scsi1', volid: VOLID }] }))),
    'helper-state',
  );
  t.equal(reason(decideMoverMigrate(DISK, 'hyper2', view(own), helper({ lock: 'backup' }))), 'helper-state');
  t.equal(reason(decideMoverMigrate(DISK, 'hyper2', view(own), helper({ status: 'running' }))), 'helper-state');
  t.equal(reason(decideMoverMigrate(DISK, 'hyper1', view(own), helper())), 'helper-state', 'already there');
  const snap = { ...own, snapshots: [{ name: 's', values: { unused0: VOLID } }] };
  t.equal(reason(decideMoverMigrate(DISK, 'hyper2', view(snap), helper())), 'helper-state', 'the helper has snapshots');
  t.equal(reason(decideMoverMigrate(DISK, 'hyper2', view(own), helper({ name: 'db' }))), 'not-our-helper');
});

t.test('move: release overwrites only the held unusedN; destroy only a helper naming no volume', async (t) => {
  const rel = decideMoverRelease(helper(), VOLID, 9999);
  t.same(rel.allowed && rel.value.body.change, { set: { unused0: releasedPlaceholder('local-lvm', 9999) } });
  t.equal(reason(decideMoverRelease(helper(), 'local-lvm:vm-9999-pvc-b', 9999)), 'helper-state');
  t.equal(reason(decideMoverRelease(helper({ name: 'db' }), VOLID, 9999)), 'not-our-helper');
  const placeholder = releasedPlaceholder('local-lvm', 9999);
  const released = helper({ held: [{ key: 'unused0', volid: placeholder }] });
  const clean = { vmid: 9999, entries: [{ key: 'unused0', value: placeholder }] };
  t.equal(reason(decideMoverDestroy(released, view(clean), 9999)), 'allowed');
  t.equal(
    reason(decideMoverDestroy(helper(), view({ vmid: 9999, entries: [{ key: 'unused0', value: VOLID }] }), 9999)),
    'helper-state',
  );
  const snapped = { ...clean, snapshots: [{ name: 's', values: { unused0: VOLID } }] };
  t.equal(reason(decideMoverDestroy(released, view(snapped), 9999)), 'helper-state', 'a snapshot section names a disk');
  const pending = { vmid: 9999, entries: [{ key: 'unused0', value: placeholder, pending: VOLID }] };
  t.equal(reason(decideMoverDestroy(released, view(pending), 9999)), 'helper-state', 'a pending value names a disk');
  t.equal(reason(decideMoverDestroy(released, view(), 9999)), 'helper-state', 'its config was not read');
  t.equal(reason(decideMoverDestroy({ ...released, name: 'db' }, view(clean), 9999)), 'not-our-helper');
  t.equal(reason(decideMoverDestroy({ ...released, status: 'running' }, view(clean), 9999)), 'helper-state');
});

// Found by the day-2 search (ownership-day2.pbt.test.ts, seed 1, 200 runs): a static PV whose
// handle names a marker did not keep the disk's markers, so DeleteVolume of the (gone) disk
// freed the marker that PV names.
t.test('a PV naming a marker keeps the disk and every marker of it', async (t) => {
  const named = proof(['homelab/hyper1/local-lvm/vm-9999-pvc-a+vac1-b0']);
  t.equal(reason(provenUnclaimed(DISK, named)), 'claimed', 'the disk');
  t.equal(reason(provenUnclaimed(MARKER, named)), 'claimed', 'the marker it names');
  t.equal(reason(provenUnclaimed({ ...DISK, disk: 'vm-9999-pvc-a+vac2-i5' }, named)), 'claimed', 'another marker');
  t.equal(reason(provenUnclaimed({ ...DISK, disk: 'vm-9999-pvc-b' }, named)), 'allowed');
});
