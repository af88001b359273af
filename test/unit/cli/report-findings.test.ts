// report's rules for what --fix may remove (src/cli/report/findings.ts), on facts built by hand:
// the cases the tier test (test/k8s/cli/report.test.ts) does not reach.
import t from 'tap';
import { nfsClasses, type ClusterFacts, type KubeFacts, type NfsFacts } from '../../../src/cli/report/facts.js';
import { isProvisionerDisk, proxmoxFindings, type Finding } from '../../../src/cli/report/findings.js';
import { nfsFindings } from '../../../src/cli/report/nfs-findings.js';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '../../../src/k8s/index.js';
import type { Cluster } from '../../../src/proxmox/controller/state/cluster.js';
import { helperWwnForSlot } from '../../../src/proxmox/contract.js';

const NOW = Date.UTC(2026, 11, 1);
const rules = { controllerVmId: 9999, graceMs: 3600e3, now: NOW };
const UID = '0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9';
const DISK = `vm-9999-pvc-${UID}`;
const vm = (vmid: number, name: string) => ({ type: 'qemu' as const, vmid, name, node: 'hyper1' });
const kube = (o: Partial<KubeFacts> = {}): KubeFacts => ({
  pvs: [pv('owner', `homelab/hyper1/local-lvm/vm-9999-pvc-00000000-0000-4000-8000-000000000000`)],
  pvcs: [],
  attachments: [],
  classes: [],
  birth: NOW - 30 * 86400e3,
  ...o,
});
function facts(o: { disks?: string[]; scan?: ClusterFacts['scan']; createdAt?: number } = {}): ClusterFacts {
  return {
    region: 'homelab',
    cluster: null as unknown as Cluster /* findings never touch it */,
    storages: [{ storage: 'local-lvm', node: 'hyper1', content: 'images', shared: false }],
    disks: (o.disks ?? [DISK]).map((disk) => ({
      node: 'hyper1',
      storage: 'local-lvm',
      disk,
      volid: `local-lvm:${disk}`,
      size: 1,
      shared: false,
      createdAt: o.createdAt ?? NOW - 7200e3,
    })),
    unlisted: [],
    scan: o.scan ?? [],
  };
}
function pv(name: string, handle: string, claim?: { namespace: string; name: string }): V1PersistentVolume {
  return {
    metadata: { name },
    spec: { csi: { driver: 'csi.proxmox.sinextra.dev', volumeHandle: handle }, ...(claim && { claimRef: claim }) },
  };
}
const byKind = (fs: Finding[], kind: string) => fs.filter((f) => f.kind === kind);

t.test('provisioned names only', (t) => {
  t.ok(isProvisionerDisk(DISK, 9999));
  t.notOk(isProvisionerDisk(`vm-9999-pvc-${UID}-extra`, 9999));
  t.notOk(isProvisionerDisk(`vm-101-pvc-${UID}`, 9999));
  t.notOk(isProvisionerDisk('vm-9999-disk-0', 9999));
  // a file storage's volume name (dir, NFS, CIFS)
  t.ok(isProvisionerDisk(`9999/vm-9999-pvc-${UID}.qcow2`, 9999));
  t.ok(isProvisionerDisk(`9999/vm-9999-pvc-${UID}.raw`, 9999));
  t.notOk(isProvisionerDisk(`101/vm-9999-pvc-${UID}.raw`, 9999));
  t.notOk(isProvisionerDisk(`9999/vm-9999-pvc-${UID}`, 9999));
  t.notOk(isProvisionerDisk(`9999/vm-9999-pvc-${UID}.raw.raw`, 9999));
  t.end();
});

t.test(
  'an old unreferenced orphan may go; a young one, one without a creation time, or a referenced one may not',
  (t) => {
    t.equal(byKind(proxmoxFindings(facts(), kube(), rules), 'orphan-disk')[0]?.action?.type, 'delete-volume');
    t.match(
      byKind(proxmoxFindings(facts({ createdAt: NOW - 60e3 }), kube(), rules), 'orphan-disk')[0]?.kept,
      /grace period/,
    );
    const noTime = facts();
    for (const d of noTime.disks) delete d.createdAt;
    t.match(byKind(proxmoxFindings(noTime, kube(), rules), 'orphan-disk')[0]?.kept, /no creation time/);
    const onBoot = facts({ scan: [{ vm: vm(101, 'cp'), entries: [{ key: 'virtio0', value: `local-lvm:${DISK}` }] }] });
    t.match(
      byKind(proxmoxFindings(onBoot, kube(), rules), 'orphan-disk')[0]?.kept,
      /still referenced: virtio0 of VM cp/,
    );
    const owned = facts({ scan: [{ vm: vm(9999, 'ctl'), entries: [{ key: 'unused0', value: `local-lvm:${DISK}` }] }] });
    const f = proxmoxFindings(owned, kube(), rules);
    t.match(byKind(f, 'orphan-disk')[0]?.kept, /unused0 of its owner VM 9999/);
    t.match(byKind(f, 'unused-entry')[0]?.kept, /owns the disk: deleting the entry would free the disk/);
    t.notOk(
      f.some((x) => x.action),
      'nothing may be done',
    );
    t.end();
  },
);

t.test('a PV in any phase keeps its disk, its markers belong to it; a marker without its disk is an orphan', (t) => {
  const marker = `${DISK}+vac2-b0-i500`;
  const f = proxmoxFindings(
    facts({ disks: [DISK, marker] }),
    kube({ pvs: [pv('pvc-x', `homelab/hyper1/local-lvm/${DISK}`)] }),
    rules,
  );
  t.same(f, [], 'nothing to say');
  const lone = proxmoxFindings(facts({ disks: [marker] }), kube(), rules);
  t.equal(byKind(lone, 'orphan-disk')[0]?.action?.type, 'free-marker');
  t.same(
    byKind(lone, 'pv-missing-disk').map((f) => f.what),
    ['PV owner'],
    'only the PV whose disk is not in the facts',
  );
  t.end();
});

t.test('helper attachments: unlinked unless the claim is being resized', (t) => {
  const scan = [
    { vm: vm(111, 'w1'), entries: [{ key: 'scsi3', value: `local-lvm:${DISK},wwn=${helperWwnForSlot(3)}` }] },
  ];
  const claim = { namespace: 'apps', name: 'data' };
  const pvs = [pv('pvc-x', `homelab/hyper1/local-lvm/${DISK}`, claim)];
  t.equal(
    byKind(proxmoxFindings(facts({ scan }), kube({ pvs }), rules), 'helper-attachment')[0]?.action?.type,
    'unlink-helpers',
  );
  const resizing = {
    metadata: claim,
    status: { allocatedResourceStatuses: { storage: 'ControllerResizeInProgress' } },
  } as V1PersistentVolumeClaim;
  t.match(
    byKind(proxmoxFindings(facts({ scan }), kube({ pvs, pvcs: [resizing] }), rules), 'helper-attachment')[0]?.kept,
    /being resized/,
  );
  t.end();
});

t.test(
  'NFS directories: only proven claims under onDelete: delete, never when a PV points at, above or below them',
  (t) => {
    const UIDDIR = `apps/pvc-${UID}`;
    const facts = (onDelete?: string): NfsFacts => ({
      classes: nfsClasses([
        {
          metadata: { name: 'c' },
          provisioner: 'nfs.csi.k8s.io',
          parameters: {
            server: 'nas',
            share: '/v/k8s',
            subDir: '${pvc.metadata.namespace}/${pv.metadata.name}',
            ...(onDelete && { onDelete }),
          },
        },
      ]),
      addresses: new Map([['nas', ['192.0.2.1']]]),
      dirs: [{ server: 'nas', share: '/v/k8s', path: UIDDIR, at: `/v/k8s/${UIDDIR}`, changedAt: NOW - 7200e3 }],
      archives: [],
      snapshots: [],
      upstreamSnapshots: [],
      restoreMarkers: [],
      errors: [],
    });
    const nfsPv = (subDir: string, name = 's') =>
      ({
        metadata: { name },
        spec: {
          csi: {
            driver: 'nfs.csi.k8s.io',
            volumeHandle: 'h',
            volumeAttributes: { server: 'nas', share: '/v/k8s', subDir },
          },
        },
      }) as V1PersistentVolume;
    // The view owns the share: one live claim elsewhere on it.
    const owner = nfsPv('other/pvc-live', 'live');
    const k = (...pvs: V1PersistentVolume[]) => kube({ pvs: [owner, ...pvs], birth: NOW - 86400e3 });
    t.equal(nfsFindings(facts('delete'), k(), rules)[0]?.action?.type, 'remove-dir');
    t.equal(nfsFindings(facts('archive'), k(), rules)[0]?.kind, 'retained-dir');
    t.match(nfsFindings(facts(), k(), rules)[0]?.kept, /driver default, not delete/);
    for (const at of [UIDDIR, 'apps', `${UIDDIR}/inner`, ''])
      t.same(nfsFindings(facts('delete'), k(nfsPv(at)), rules), [], `a PV at "${at}"`);
    t.equal(
      nfsFindings(facts('delete'), k(nfsPv('apps/other')), rules)[0]?.action?.type,
      'remove-dir',
      "a sibling's PV does not count",
    );
    t.end();
  },
);
