// The report's judgement (and so the controller's findings refresh) matches claim directories
// against PVs and disks against VM configs through indexes: the work is linear in the sizes, not
// their product. Pinned by counting reads of the inputs, not by timing: at 1,000 and 2,000 claims
// a quadratic match reads every PV once per directory (millions of reads), an indexed one a few
// times in all.
import t from 'tap';
import { nfsFindings } from '../../../src/cli/report/nfs-findings.js';
import { proxmoxFindings } from '../../../src/cli/report/findings.js';
import { useIndex, usesOf, type VmEntries } from '../../../src/proxmox/controller/state/scan.js';
import type { V1PersistentVolume } from '../../../src/k8s/index.js';
import {
  ADDRESSES,
  HOUR,
  NSPV,
  clusterFacts,
  dynamicNfsPv,
  kube,
  nfsClass,
  nfsFacts,
  proxmoxPv,
  rules,
  uid,
} from './day2-fixtures.js';

const SHARE = '/export';

/** A PV whose spec reads are counted. */
function counted(pv: V1PersistentVolume, reads: { n: number }): V1PersistentVolume {
  const spec = pv.spec;
  return Object.defineProperty({ ...pv }, 'spec', {
    get: () => {
      reads.n++;
      return spec;
    },
    enumerable: true,
  });
}

function nfsReads(n: number): { reads: number; findings: number } {
  const reads = { n: 0 };
  const pvs: V1PersistentVolume[] = [];
  const dirs: Array<[string, string, number]> = [];
  for (let i = 0; i < n; i++) {
    const name = `pvc-${uid(i)}`;
    dirs.push(['127.0.0.1', `${SHARE}/ns${i % 7}/${name}`, 2 * HOUR]);
    // Every other directory has its PV: the rest are orphans, judged against all PVs.
    if (i % 2 === 0) pvs.push(counted(dynamicNfsPv(name, '127.0.0.1', SHARE, `ns${i % 7}/${name}`), reads));
  }
  const facts = { ...nfsFacts({ classes: [nfsClass('nfs', SHARE, NSPV, 'delete')], dirs }), addresses: ADDRESSES };
  const findings = nfsFindings(facts, kube({ pvs }), rules).length;
  return { reads: reads.n, findings };
}

t.test('claim directories against PVs: each PV is read a bounded number of times', (t) => {
  const small = nfsReads(1000);
  const large = nfsReads(2000);
  t.equal(small.findings, 500, 'the orphans of 1,000 directories are found');
  t.equal(large.findings, 1000, 'and of 2,000');
  // An index reads each PV a few times (building it); a pass per directory reads it n times.
  t.ok(large.reads <= 4 * 1000, `PV reads at 2,000 directories: ${large.reads} (at most 4 per PV)`);
  t.ok(large.reads <= 2.2 * small.reads, `linear: ${small.reads} reads at 1,000, ${large.reads} at 2,000`);
  t.end();
});

const vm = (vmid: number, disks: string[]): VmEntries => ({
  vm: { type: 'qemu', vmid, name: `w${vmid}`, node: 'hyper1' },
  entries: [
    { key: 'scsi0', value: `local-lvm:vm-${vmid}-disk-0,size=8G` },
    ...disks.map((d, i) => ({ key: `scsi${i + 1}`, value: `local-lvm:${d},wwn=0x5056432d49443031` })),
    { key: 'unused0', value: `local-lvm:vm-${vmid}-disk-1` },
  ],
});

/** Entries whose values are counted as they are read. */
function countedScan(scan: VmEntries[], reads: { n: number }): VmEntries[] {
  return scan.map(({ vm: v, entries }) => ({
    vm: v,
    entries: entries.map((e) => {
      const value = e.value;
      return Object.defineProperty({ ...e }, 'value', {
        get: () => {
          reads.n++;
          return value;
        },
        enumerable: true,
      });
    }),
  }));
}

function proxmoxReads(disks: number): number {
  const names = Array.from({ length: 2000 }, (_, i) => `vm-9999-pvc-${uid(i)}`);
  // The same 40 VMs with 20 driver disks each in both runs; only the disks judged differ.
  const scan = Array.from({ length: 40 }, (_, v) => vm(100 + v, names.slice(v * 20, v * 20 + 20)));
  const reads = { n: 0 };
  const judged = names.slice(0, disks);
  proxmoxFindings(
    clusterFacts(
      judged.map((disk) => ({ disk, age: 2 * HOUR })),
      countedScan(scan, reads),
    ),
    kube({ pvs: judged.map((d, i) => proxmoxPv(`pv-${i}`, d)) }),
    rules,
  );
  return reads.n;
}

t.test('disks against VM configs: each config entry is read a bounded number of times', (t) => {
  const few = proxmoxReads(10);
  const many = proxmoxReads(2000);
  // Reading the configs must not grow with the number of disks judged.
  t.ok(many <= 2 * few, `config reads: ${few} for 10 disks, ${many} for 2,000`);
  t.end();
});

t.test('useIndex answers as usesOf, in the same order', (t) => {
  const scan: VmEntries[] = [
    vm(101, ['vm-9999-pvc-a', 'vm-9999-pvc-b']),
    {
      vm: { type: 'qemu', vmid: 102, name: 'w102', node: 'hyper2' },
      entries: [
        { key: 'scsi1', value: 'local-lvm:vm-9999-pvc-a', pending: 'local-lvm:vm-9999-pvc-c' },
        { key: 'scsi2', pending: 'local-lvm:vm-9999-pvc-b' },
        { key: 'scsi3', value: 'local-lvm:vm-9999-pvc-b', pendingDelete: true },
        { key: 'virtio0', value: 'file=local-lvm:vm-9999-pvc-a,size=1G' },
        { key: 'unused1', value: 'local-lvm:vm-9999-pvc-c' },
        { key: 'description', value: 'not:a drive' },
      ],
    },
  ];
  const ix = useIndex(scan);
  for (const [storage, disk] of [
    ['local-lvm', 'vm-9999-pvc-a'],
    ['local-lvm', 'vm-9999-pvc-b'],
    ['local-lvm', 'vm-9999-pvc-c'],
    ['local-lvm', 'vm-101-disk-0'],
    ['local-lvm', 'vm-101-disk-1'],
    ['other', 'vm-9999-pvc-a'],
  ] as const)
    t.same(ix(storage, disk), usesOf(scan, storage, disk), `${storage}:${disk}`);
  t.end();
});
