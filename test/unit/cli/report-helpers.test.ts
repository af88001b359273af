// report's findings about the driver's helper VMs of snapshots and clones (src/cli/report/
// helper-vms.ts, helper-findings.ts), on facts built by hand: which helper VMs are leftovers
// --fix may remove, which are listed for information, which are kept and why, and restored
// volumes no PersistentVolume names.
import t from 'tap';
import type { ClusterFacts, KubeFacts } from '../../../src/cli/report/facts.js';
import { proxmoxFindings, type Finding } from '../../../src/cli/report/findings.js';
import { COPY_VM_STALE_MS, type HelperFact, helperRecord } from '../../../src/cli/report/helper-vms.js';
import type { V1PersistentVolume } from '../../../src/k8s/index.js';
import type { CopyRecord, CopyRole } from '../../../src/proxmox/controller/safety/copy-vms.js';
import { COPY_VM_NAMES, formatRecord } from '../../../src/proxmox/controller/safety/copy-vms.js';
import type { Cluster } from '../../../src/proxmox/controller/state/cluster.js';

const NOW = Date.UTC(2026, 11, 1);
const rules = { controllerVmId: 9999, graceMs: 3600e3, now: NOW };
const R = 812_345_678;
const CLONE = `local-lvm:vm-${R}-disk-0`;

const pv = (name: string, handle: string): V1PersistentVolume => ({
  metadata: { name },
  spec: { csi: { driver: 'csi.proxmox.sinextra.dev', volumeHandle: handle } },
});
const kube = (pvs: V1PersistentVolume[] = [pv('other', 'homelab/hyper1/local-lvm/vm-9999-pvc-x')]): KubeFacts => ({
  pvs,
  pvcs: [],
  attachments: [],
  classes: [],
  birth: NOW - 30 * 86400e3,
});

interface H {
  role: CopyRole;
  ageMs?: number;
  entries?: Record<string, string>;
  snapshots?: string[];
  owned?: string[] | undefined;
  status?: string;
}
function helper(h: H): HelperFact {
  const record: CopyRecord = {
    role: h.role,
    controller: 9999,
    name: 'pvc-r',
    source: 'homelab/hyper1/local-lvm/vm-9999-pvc-src',
    created: Math.floor((NOW - (h.ageMs ?? 7200e3)) / 1000),
  };
  const entries = Object.entries({ description: formatRecord(record), ...h.entries }).map(([key, value]) => ({
    key,
    value,
  }));
  return {
    vm: { type: 'qemu', vmid: R, name: COPY_VM_NAMES[h.role], node: 'hyper1', status: h.status ?? 'stopped' },
    record,
    entries,
    snapshots: h.snapshots ?? [],
    owned:
      'owned' in h && h.owned === undefined
        ? undefined
        : (h.owned ?? []).map((volid) => ({
            storage: 'local-lvm',
            disk: volid.split(':')[1] ?? '',
            volid,
            size: 2 ** 30,
            createdAt: NOW - 7200e3,
          })),
  };
}
function facts(helpers: HelperFact[], scan: ClusterFacts['scan'] = []): ClusterFacts {
  return {
    region: 'homelab',
    cluster: null as unknown as Cluster,
    storages: [{ storage: 'local-lvm', node: 'hyper1', content: 'images', shared: false }],
    disks: [],
    unlisted: [],
    scan,
    helpers,
  };
}
/** The findings, without the PV of the default view whose disk is not in these facts. */
const find = (h: HelperFact, k = kube(), scan: ClusterFacts['scan'] = []): Finding[] =>
  proxmoxFindings(facts([h], scan), k, rules).filter((f) => f.what !== 'PV other');
const one = (fs: Finding[]): Finding => {
  if (fs.length !== 1) throw new Error(`expected one finding, got ${JSON.stringify(fs)}`);
  return fs[0] as Finding;
};

t.test('a copy VM older than any copy is a leftover (its temporary snapshot first); a young one is kept', (t) => {
  const old = one(find(helper({ role: 'copy', ageMs: COPY_VM_STALE_MS + 1000, snapshots: ['csiabc'] })));
  t.equal(old.kind, 'helper-vm');
  t.match(old.detail, /temporary snapshot csiabc/);
  t.same(old.action, {
    type: 'remove-helper',
    region: 'homelab',
    node: 'hyper1',
    vmid: R,
    created: Math.floor((NOW - COPY_VM_STALE_MS - 1000) / 1000),
  });
  const young = one(find(helper({ role: 'copy', ageMs: 60e3 })));
  t.notOk(young.action);
  t.match(young.kept, /may be under way/);
  const locked = one(find(helper({ role: 'copy', entries: { lock: 'snapshot' } })));
  t.notOk(locked.action);
  t.match(locked.kept, /locked \(snapshot\)/);
  const running = one(find(helper({ role: 'copy', status: 'running' })));
  t.notOk(running.action, 'a running helper VM is never removed');
  t.end();
});

t.test('a snapshot VM with its clone is a snapshot (information); without it, a leftover', (t) => {
  const ok = one(find(helper({ role: 'snapshot', entries: { scsi0: `${CLONE},size=1G` }, owned: [CLONE] })));
  t.equal(ok.kind, 'snapshot');
  t.equal(ok.what, CLONE);
  t.notOk(ok.action);
  const gone = one(find(helper({ role: 'snapshot', entries: { scsi0: `${CLONE},size=1G` }, owned: [] })));
  t.equal(gone.kind, 'helper-vm');
  t.equal(gone.action?.type, 'remove-helper');
  const none = one(find(helper({ role: 'snapshot', owned: [] })));
  t.match(none.detail, /no scsi0/);
  t.equal(none.action?.type, 'remove-helper');
  const unknown = one(find(helper({ role: 'snapshot', owned: undefined })));
  t.notOk(unknown.action, 'a storage that could not be listed proves nothing');
  t.end();
});

t.test('a volume VM: claimed, orphaned, half-made, or without its disk', (t) => {
  const released = {
    role: 'volume' as const,
    entries: { unused0: `local-lvm:vm-${R}-pve-nfs-csi-released-disk-0` },
    owned: [CLONE],
  };
  const handle = `homelab/hyper1/local-lvm/vm-${R}-disk-0`;
  t.same(
    find(helper(released), kube([pv('restored', handle)])),
    [],
    'a PV names it: nothing to say (and its disk is not missing)',
  );
  const orphan = one(find(helper(released)));
  t.equal(orphan.kind, 'orphan-disk');
  t.same(orphan.action, { type: 'delete-volume', region: 'homelab', volumeId: handle });
  const young = helper(released);
  for (const d of young.owned ?? []) d.createdAt = NOW - 60e3;
  t.match(one(find(young)).kept, /grace period/);
  t.match(one(find(helper(released), kube([]))).kept, /no PersistentVolume/, 'another cluster’s view frees nothing');
  const attached = find(helper(released), kube(), [
    {
      vm: { type: 'qemu', vmid: 111, name: 'w', node: 'hyper1' },
      entries: [{ key: 'scsi3', value: `${CLONE},size=1G` }],
    },
  ]);
  t.match(one(attached).kept, /still referenced: scsi3 of VM w/);

  const half = one(find(helper({ role: 'volume', entries: { scsi0: `${CLONE},size=1G` }, owned: [CLONE] })));
  t.equal(half.kind, 'helper-vm');
  t.notOk(half.action, 'a restore the provisioner may still retry');
  t.match(half.kept, /finishes it when retried/);

  const diskless = one(find(helper({ ...released, owned: [`local-lvm:vm-${R}-disk-0+vac1-b0`] })));
  t.equal(diskless.kind, 'helper-vm');
  t.match(diskless.detail, /whose disk is gone/);
  t.equal(diskless.action?.type, 'remove-helper');
  t.end();
});

t.test('a VM with a helper name is ours only with our record', (t) => {
  const rec = (controller: number, role: CopyRole = 'copy') =>
    formatRecord({ role, controller, name: 'x', source: 'y', created: 1 });
  const vm = (name: string) => ({ type: 'qemu' as const, vmid: R, name, node: 'hyper1' });
  t.ok(helperRecord(vm('pve-nfs-csi-copy'), [{ key: 'description', value: rec(9999) }], 9999));
  t.notOk(helperRecord(vm('pve-nfs-csi-copy'), [{ key: 'description', value: rec(1234) }], 9999));
  t.notOk(helperRecord(vm('pve-nfs-csi-copy'), [], 9999));
  t.notOk(
    helperRecord(vm('pve-nfs-csi-volume'), [{ key: 'description', value: rec(9999) }], 9999),
    'role and name differ',
  );
  t.notOk(helperRecord(vm('my-vm'), [{ key: 'description', value: rec(9999) }], 9999));
  t.end();
});
