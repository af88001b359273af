// The attach queue's planner as plain tables: VM entries and requests in, decisions out. No
// API, no fake, no time (src/proxmox/controller/attach/attach-plan.ts).
import t from 'tap';
import type { ConfigEntry } from '../../../../../src/proxmox/api/api.js';
import {
  type AttachRequest,
  HelperLeftovers,
  conflictOf,
  hotplugsDisks,
  planAttach,
  planDetach,
  planUpdate,
  settle,
  unlinkVerified,
} from '../../../../../src/proxmox/controller/attach/attach-plan.js';
import { driveOptionsFromContext } from '../../../../../src/proxmox/controller/params/params.js';
import { helperWwnForSlot, wwnForSlot } from '../../../../../src/proxmox/contract.js';

const VM = { vmid: 111, node: 'hyper1', name: 'talos-worker-1' };
const BOOT: ConfigEntry = { key: 'scsi0', value: 'local-lvm:vm-111-disk-0,iothread=1,size=64G' };
const drive = (disk: string, slot: number, extra = '') => `local-lvm:${disk},backup=1,wwn=${wwnForSlot(slot)}${extra}`;
const req = (disk: string, o: Partial<AttachRequest> = {}): AttachRequest => ({
  storage: 'local-lvm',
  disk,
  diskNode: 'hyper1',
  options: driveOptionsFromContext({}, false),
  exclusive: true,
  ...o,
});
const names = (m: Map<number, Error>) => Object.fromEntries([...m].map(([i, e]) => [i, (e as { kind?: string }).kind]));

t.test('planAttach: slots, leftovers, obstacles, refusals', async (t) => {
  const rows: Array<{
    name: string;
    entries: ConfigEntry[];
    reqs: AttachRequest[];
    slots: Record<number, number>;
    unlink?: string[];
    del?: string[];
    rejects?: Record<number, string>;
  }> = [
    {
      name: 'first free slots in request order',
      entries: [BOOT],
      reqs: [req('vm-9999-a'), req('vm-9999-b')],
      slots: { 0: 1, 1: 2 },
    },
    {
      name: 'current, pending and pending-delete entries all hold their slot',
      entries: [
        BOOT,
        { key: 'scsi1', value: drive('vm-9999-x', 1) },
        { key: 'scsi2', pending: drive('vm-9999-y', 2) },
        { key: 'scsi3', value: drive('vm-9999-z', 3), pendingDelete: true },
      ],
      reqs: [req('vm-9999-a')],
      slots: { 0: 4 },
    },
    {
      name: 'a pending attach of the same disk keeps its slot',
      entries: [BOOT, { key: 'scsi7', pending: drive('vm-9999-a', 7) }],
      reqs: [req('vm-9999-a')],
      slots: { 0: 7 },
    },
    {
      name: 'a pending delete of the disk is unlinked first',
      entries: [BOOT, { key: 'scsi2', value: drive('vm-9999-a', 2), pendingDelete: true }],
      reqs: [req('vm-9999-a')],
      slots: {},
      unlink: ['scsi2'],
    },
    {
      name: 'foreign unusedN leftovers of the disk are dropped',
      entries: [BOOT, { key: 'unused0', value: 'local-lvm:vm-9999-a' }],
      reqs: [req('vm-9999-a')],
      slots: { 0: 1 },
      del: ['unused0'],
    },
    {
      name: 'a helper leftover is an obstacle for a publish',
      entries: [BOOT, { key: 'scsi4', value: `local-lvm:vm-9999-a,backup=0,wwn=${helperWwnForSlot(4)}` }],
      reqs: [req('vm-9999-a')],
      slots: {},
      unlink: ['scsi4'],
    },
    {
      name: 'a helper refuses to touch a publish',
      entries: [BOOT, { key: 'scsi4', value: drive('vm-9999-a', 4) }],
      reqs: [req('vm-9999-a', { helper: true })],
      slots: {},
      rejects: { 0: 'Aborted' },
    },
    {
      name: 'only what fits: ResourceExhausted for the rest',
      entries: [
        BOOT,
        ...Array.from({ length: 29 }, (_, i) => ({ key: `scsi${i + 1}`, value: drive(`vm-9999-o${i}`, i + 1) })),
      ],
      reqs: [req('vm-9999-a'), req('vm-9999-b')],
      slots: { 0: 30 },
      rejects: { 1: 'ResourceExhausted' },
    },
  ];
  for (const r of rows) {
    const p = planAttach(VM, r.entries, r.reqs);
    t.same(Object.fromEntries(p.assigned), r.slots, `${r.name}: slots`);
    for (const [i, slot] of p.assigned)
      t.match(
        p.set[`scsi${slot}`],
        new RegExp(`^local-lvm:${r.reqs[i]?.disk ?? '?'},.*wwn=${wwnForSlot(slot)}`),
        `${r.name}: drive line of scsi${slot}`,
      );
    t.same(p.unlink, r.unlink ?? [], `${r.name}: unlink`);
    t.same(p.delete, r.del ?? [], `${r.name}: delete`);
    t.same(names(p.rejects), r.rejects ?? {}, `${r.name}: rejects`);
  }
});

t.test("settle: already attached, readonly mismatch, the VM's own disk", async (t) => {
  const entries = [BOOT, { key: 'scsi3', value: drive('vm-9999-a', 3) }];
  const [done, ro, own, open] = settle(VM, entries, [
    req('vm-9999-a'),
    req('vm-9999-a', { options: driveOptionsFromContext({}, true) }),
    req('vm-111-disk-0'),
    req('vm-9999-b'),
  ]);
  t.match(done, { kind: 'attached', slot: 3 });
  t.match(ro, { kind: 'reject', error: { kind: 'AlreadyExists' } });
  t.match(own, { kind: 'reject', error: { kind: 'FailedPrecondition' } });
  t.equal(open, undefined);
});

t.test("planDetach: driver sites and foreign leftovers only; the VM's own disk refused", async (t) => {
  const entries = [
    BOOT,
    { key: 'scsi2', value: drive('vm-9999-a', 2) },
    { key: 'unused1', value: 'local-lvm:vm-9999-a' },
    { key: 'unused0', value: 'local-lvm:vm-111-disk-1' },
  ];
  const p = planDetach(VM, entries, [
    { storage: 'local-lvm', disk: 'vm-9999-a' },
    { storage: 'local-lvm', disk: 'vm-9999-gone' },
    { storage: 'local-lvm', disk: 'vm-111-disk-0' },
  ]);
  t.same(p.unlink, ['scsi2', 'unused1']);
  t.same(p.done, [1]);
  t.same(names(p.rejects), { 2: 'FailedPrecondition' });
});

t.test('planUpdate: rewrite stale options, refuse pending, done when equal', async (t) => {
  const entries = [
    BOOT,
    { key: 'scsi1', value: drive('vm-9999-a', 1) },
    { key: 'scsi2', value: drive('vm-9999-b', 2, ',iops_rd=100,iops_wr=100') },
    { key: 'scsi3', pending: drive('vm-9999-c', 3) },
  ];
  const p = planUpdate(VM, entries, [
    { storage: 'local-lvm', disk: 'vm-9999-a', options: { iops_rd: '100', iops_wr: '100' } },
    { storage: 'local-lvm', disk: 'vm-9999-b', options: { iops_rd: '100', iops_wr: '100' } },
    { storage: 'local-lvm', disk: 'vm-9999-c', options: { backup: '0' } },
  ]);
  t.same(Object.keys(p.set), ['scsi1']);
  t.match(p.set.scsi1, /iops_rd=100/);
  t.same(p.done, [1]);
  t.same(names(p.rejects), { 2: 'Unavailable' });
});

t.test("conflictOf: another VM, the owner's own bus, helper leftovers", async (t) => {
  const vm = (vmid: number, entries: ConfigEntry[]) => ({
    vm: { type: 'qemu' as const, vmid, node: 'hyper1', name: `vm${vmid}` },
    entries,
  });
  t.equal(conflictOf([vm(101, [BOOT])], req('vm-9999-a')), undefined);
  t.match(
    conflictOf([vm(101, [{ key: 'scsi1', value: drive('vm-9999-a', 1) }])], req('vm-9999-a'))?.message,
    /attached as scsi1 of VM vm101/,
  );
  t.match(
    conflictOf([vm(101, [{ key: 'scsi1', pending: drive('vm-9999-a', 1) }])], req('vm-9999-a'))?.message,
    /being attached/,
  );
  t.match(
    conflictOf([vm(101, [{ key: 'virtio0', value: 'local-lvm:vm-101-disk-0' }])], req('vm-101-disk-0'))?.message,
    /attached as virtio0 of VM vm101 .*never attached elsewhere/,
  );
  const h = conflictOf(
    [vm(101, [{ key: 'scsi5', value: `local-lvm:vm-9999-a,wwn=${helperWwnForSlot(5)}` }])],
    req('vm-9999-a'),
  );
  t.ok(h instanceof HelperLeftovers);
  t.same(
    (h as HelperLeftovers).vms.map((v) => v.vmid),
    [101],
  );
});

t.test('hotplugsDisks: qemu-server defaults and lists', async (t) => {
  const rows: Array<[ConfigEntry[], boolean]> = [
    [[], true],
    [[{ key: 'hotplug', value: '1' }], true],
    [[{ key: 'hotplug', value: 'network,disk,usb' }], true],
    [[{ key: 'hotplug', value: '0' }], false],
    [[{ key: 'hotplug', value: 'network,usb' }], false],
    [[{ key: 'hotplug', value: 'disk', pending: 'network' }], false],
  ];
  for (const [entries, want] of rows) t.equal(hotplugsDisks(entries), want, JSON.stringify(entries));
});

t.test('unlinkVerified: when a synchronous unlink answer proves the keys gone', async (t) => {
  const rows: Array<[ConfigEntry[], string[], boolean, string]> = [
    [[], ['scsi3'], true, 'default hotplug has disk: unplugged and verified, or 400'],
    [[], ['scsi3', 'unused0'], true, 'unusedN is dropped from the config at once'],
    [[], ['virtio2'], true, 'virtio disks hot-unplug too'],
    [[{ key: 'hotplug', value: 'network,usb' }], ['scsi3'], false, 'no disk hot-plug: stays pending, no error'],
    [[{ key: 'hotplug', value: '1', pending: '0' }], ['scsi3'], false, 'a pending hotplug change: not trusted'],
    [[], ['sata1'], false, 'sata/ide are skipped silently by qemu-server'],
    [[], ['scsi3', 'ide2'], false, 'one skipped key is enough to read back'],
  ];
  for (const [entries, keys, want, why] of rows) t.equal(unlinkVerified(entries, keys), want, why);
});
