// The gate's rule for a volume VM's offline migration (a restore or clone into another zone,
// docs/snapshots.md): only our stopped, unlocked volume VM holding exactly its own clone as
// scsi0, with no snapshot section and no other VM of the host naming the clone, to a target that
// was read now, has the storage, and holds no volume of that VMID (it would pass for the clone).
import t from 'tap';
import type { ConfigEntry, VmResource } from '../../../../../src/proxmox/api/api.js';
import {
  type CopyStep,
  type CopyView,
  copyStepProblem,
  formatRecord,
} from '../../../../../src/proxmox/controller/safety/copy-vms.js';

const R = 812_345_678;
const CLONE = `local-lvm:vm-${R}-disk-0`;
const record = (o: Partial<{ role: string; controller: number }> = {}) =>
  formatRecord({ role: 'volume', controller: 9999, name: 'pvc-x', source: 's', created: 1, ...o } as never);

interface Spec {
  name?: string;
  status?: string;
  entries?: Record<string, string>;
  snapshots?: boolean;
  other?: Record<string, string>;
  target?: CopyView['target'] | null;
}

function view(s: Spec = {}): CopyView {
  const vm: VmResource = {
    type: 'qemu',
    vmid: R,
    name: s.name ?? 'pve-nfs-csi-volume',
    node: 'hyper1',
    status: s.status ?? 'stopped',
  };
  const worker: VmResource = { type: 'qemu', vmid: 111, name: 'talos-worker-1', node: 'hyper1', status: 'running' };
  const toEntries = (m: Record<string, string>): ConfigEntry[] =>
    Object.entries(m).map(([key, value]) => ({ key, value }));
  const own = { description: record(), digest: 'd', scsi0: `${CLONE},size=1G`, ...s.entries };
  return {
    host: {
      fresh: true,
      vms: [vm, worker],
      entries: [
        { vm, entries: toEntries(Object.fromEntries(Object.entries(own).filter(([, v]) => v !== ''))) },
        { vm: worker, entries: toEntries({ scsi0: 'local-lvm:vm-111-disk-0', ...s.other }) },
      ],
      snapshots: new Map(s.snapshots ? [[R, [{ name: 's', values: { scsi0: CLONE } }]]] : []),
    },
    vmids: new Set([R, 111]),
    controllerVmId: 9999,
    ...(s.target !== null && { target: s.target ?? { node: 'hyper2', storages: ['local-lvm'], volids: [] } }),
  };
}

const step: CopyStep = { op: 'migrate', node: 'hyper1', vmid: R, volid: CLONE, target: 'hyper2' };
const why = (v: CopyView, st: CopyStep = step) => copyStepProblem(st, v)?.message;

t.test('allowed: our volume VM holding only its clone, to a target read now', async (t) => {
  t.equal(why(view()), undefined);
});

t.test('refused: not ours, running, locked', async (t) => {
  t.match(why(view({ name: 'my-vm' })), /is not a volume VM of this driver/);
  t.match(why(view({ entries: { description: record({ controller: 7777 }) } })), /not a volume VM/);
  t.match(why(view({ entries: { description: record({ role: 'snapshot' }) } })), /not a volume VM/);
  t.match(why(view({ status: 'running' })), /running/);
  t.match(why(view({ entries: { lock: 'migrate' } })), /locked \(migrate\)/);
});

t.test('refused: anything beyond its own clone as scsi0 would move (or be freed) with it', async (t) => {
  t.match(why(view({ entries: { scsi0: '' } })), /does not hold exactly its clone/, 'let go of already');
  t.match(why(view({ entries: { scsi1: 'local-lvm:vm-9999-pvc-a' } })), /does not hold exactly its clone/);
  t.match(why(view({ entries: { scsi0: 'local-lvm:vm-9999-pvc-a' } })), /does not hold exactly its clone/);
  t.match(why(view({ entries: { unused0: `local-lvm:vm-${R}-disk-1` } })), /references more than its clone/);
  t.match(why(view({ snapshots: true })), /snapshot section/);
  t.match(why(view(), { ...step, volid: `local-lvm:vm-${R}-disk-1` }), /does not hold exactly its clone/);
  t.match(why(view({ other: { scsi1: CLONE } })), /is scsi1 of VM talos-worker-1/, 'another VM names the clone');
});

t.test('refused: a target not read, without the storage, or holding a volume of that VMID', async (t) => {
  t.match(why(view(), { ...step, target: 'hyper1' }), /on hyper1 already/);
  t.match(why(view({ target: null })), /was not read/);
  t.match(why(view({ target: { node: 'hyper3', storages: ['local-lvm'], volids: [] } })), /was not read/);
  t.match(why(view({ target: { node: 'hyper2', storages: ['other'], volids: [] } })), /not available on hyper2/);
  const left = { node: 'hyper2', storages: ['local-lvm'], volids: [`local-lvm:vm-${R}-disk-0`] };
  t.match(why(view({ target: left })), /hyper2 already holds local-lvm:vm-812345678-disk-0/);
  const others = { node: 'hyper2', storages: ['local-lvm'], volids: ['local-lvm:vm-9999-pvc-b'] };
  t.equal(why(view({ target: others })), undefined, "other VMIDs' volumes do not matter");
});
