// Every typed refusal of `move` (src/cli/move/refusal.ts) on fakes: each from the state it guards,
// each a RefusedError (exit 4) with a message that says what to do, and none changes anything.
import t from 'tap';
import { RefusedError } from '../../../../src/cli/common.js';
import { type RefusalReason, isRefusal } from '../../../../src/cli/move/refusal.js';
import {
  MoveRun,
  abortMove,
  checkMove,
  clusterFor,
  locateMove,
  startOrResume,
} from '../../../../src/cli/move/start.js';
import { fakeClock } from '../../../helpers/fake-clock.js';
import { rejection } from '../../../helpers/rejection.js';
import { NS } from './fake-kube.js';
import { CLAIM, DISK, OLD_PV, world, type World } from './world.js';

const setPv = (w: World, change: (pv: NonNullable<ReturnType<World['kube']['pvs']['get']>>) => void) => {
  const pv = w.kube.pvs.get(OLD_PV);
  if (!pv) throw new Error('no PV');
  change(pv);
};

/** A record of a move of the claim to hyper2 at `step`, on the old PV. */
const recorded = (w: World, step = 'holding') =>
  setPv(w, (pv) => {
    pv.metadata.annotations = {
      ...pv.metadata.annotations,
      'pve-nfs-csi.io/move': JSON.stringify({
        v: 1,
        claim: { namespace: NS, name: CLAIM },
        oldPv: OLD_PV,
        newPv: `${OLD_PV}-hyper2`,
        from: `homelab/hyper1/local-lvm/${DISK}`,
        to: `homelab/hyper2/local-lvm/${DISK}`,
        toZone: 'hyper2',
        reclaimPolicy: 'Delete',
        savedClaim: { uid: 'x', spec: {} },
        step,
        started: '2026-01-01T00:00:00Z',
      }),
    };
  });

interface Case {
  reason: RefusalReason;
  message: RegExp;
  setup?: (w: World) => void;
  call?: (w: World) => Promise<unknown>;
}

const cases: Case[] = [
  {
    reason: 'claim-not-found',
    message: /claim apps\/nope not found/,
    call: (w) => startOrResume(w.deps(), { ...w.req, name: 'nope' }),
  },
  {
    reason: 'claim-not-bound',
    message: /claim apps\/waiting is Pending: only a bound claim has a disk to move/,
    setup: (w) =>
      w.kube.addPvc({ metadata: { name: 'waiting', namespace: NS }, spec: {}, status: { phase: 'Pending' } }),
    call: (w) => startOrResume(w.deps(), { ...w.req, name: 'waiting' }),
  },
  {
    reason: 'pv-not-found',
    message: /PV gone of claim apps\/orphan not found/,
    setup: (w) =>
      w.kube.addPvc({
        metadata: { name: 'orphan', namespace: NS },
        spec: { volumeName: 'gone' },
        status: { phase: 'Bound' },
      }),
    call: (w) => startOrResume(w.deps(), { ...w.req, name: 'orphan' }),
  },
  {
    reason: 'move-recorded',
    message: /already records a move of this claim \(another run started it\?\); run move again to continue it/,
    setup: (w) => recorded(w),
    call: (w) => checkMove(w.deps(), w.req),
  },
  {
    reason: 'other-move-recorded',
    message:
      /a move of apps\/data to hyper2 is recorded \(step holding\); run move apps\/data --to-zone hyper2 --yes to finish it, or --abort/,
    setup: (w) => recorded(w),
    call: (w) => startOrResume(w.deps(), { ...w.req, toZone: 'hyper3' }),
  },
  {
    reason: 'nothing-recorded',
    message: /no move of apps\/data is recorded/,
    call: (w) => abortMove(w.deps(), w.req),
  },
  {
    reason: 'nfs-volume',
    message:
      /is an NFS volume \(nfs\.csi\.k8s\.io\): its data is on the NAS and every node can mount it; there is nothing to move/,
    setup: (w) => setPv(w, (pv) => pv.spec.csi && (pv.spec.csi.driver = 'nfs.csi.k8s.io')),
  },
  {
    reason: 'not-proxmox',
    message: /PV pvc-1 is not a Proxmox volume \(driver ebs\.csi\.aws\.com\)/,
    setup: (w) => setPv(w, (pv) => pv.spec.csi && (pv.spec.csi.driver = 'ebs.csi.aws.com')),
  },
  {
    reason: 'handle-without-zone',
    message: /volume handle vm-9999-pvc-1 does not name a host/,
    setup: (w) => setPv(w, (pv) => pv.spec.csi && (pv.spec.csi.volumeHandle = DISK)),
  },
  {
    reason: 'other-region',
    message: /PV pvc-1 is in region elsewhere; the config's cluster is homelab/,
    setup: (w) => setPv(w, (pv) => pv.spec.csi && (pv.spec.csi.volumeHandle = `elsewhere/hyper1/local-lvm/${DISK}`)),
  },
  {
    reason: 'already-there',
    message: /claim apps\/data is already on hyper1/,
    call: (w) => startOrResume(w.deps(), { ...w.req, toZone: 'hyper1' }),
  },
  {
    reason: 'unknown-zone',
    message: /unknown zone "hyper9": the hosts of cluster homelab are hyper1, hyper2, hyper3/,
    call: (w) => startOrResume(w.deps(), { ...w.req, toZone: 'hyper9' }),
  },
  {
    reason: 'no-storage-on-target',
    message: /storage local-lvm does not exist on hyper2/,
    setup: (w) => w.api.nodes.get('hyper2')?.delete('local-lvm'),
  },
  {
    reason: 'attached',
    message:
      /PV pvc-1 is attached to talos-worker-1 \(VolumeAttachment csi-1\): scale the workload down and wait for the detach/,
    setup: (w) =>
      w.kube.attachments.push({
        metadata: { name: 'csi-1' },
        spec: {
          attacher: 'csi.proxmox.sinextra.dev',
          nodeName: 'talos-worker-1',
          source: { persistentVolumeName: OLD_PV },
        },
      }),
  },
  {
    reason: 'in-use',
    message: /claim apps\/data is used by pod sonarr-0: scale the workload down first/,
    setup: (w) =>
      w.kube.pods.push({
        metadata: { name: 'sonarr-0', namespace: NS },
        spec: { volumes: [{ name: 'd', persistentVolumeClaim: { claimName: CLAIM } }] },
        status: { phase: 'Running' },
      }),
  },
  {
    reason: 'disk-in-vm-config',
    message:
      /local-lvm:vm-9999-pvc-1 is in the config of VM 111 \(talos-worker-1\) on hyper1 as scsi5: detach it first/,
    setup: (w) => w.api.vmOf(111).config.set('scsi5', `local-lvm:${DISK},backup=0`),
  },
  {
    reason: 'disk-missing',
    message: /local-lvm:vm-9999-pvc-1 does not exist on hyper1: nothing to move/,
    setup: (w) => w.api.storageOf('hyper1', 'local-lvm').volumes.delete(DISK),
  },
  {
    reason: 'target-disk-exists',
    message: /a disk local-lvm:vm-9999-pvc-1 already exists on hyper2; Proxmox would import under another name/,
    setup: (w) => w.api.storageOf('hyper2', 'local-lvm').volumes.set(DISK, 1),
  },
  {
    reason: 'vmid-taken',
    message: /VMID 9999 is taken by VM "important" on hyper3; move needs it for its helper VM/,
    setup: (w) => w.api.addVm({ vmid: 9999, name: 'important', node: 'hyper3' }),
  },
  {
    reason: 'mover-busy',
    message:
      /the helper VM 9999 on hyper3 holds local-lvm:vm-9999-disk-0: another move is in progress; finish it first/,
    setup: (w) => {
      const vm = w.api.addVm({ vmid: 9999, name: 'pve-nfs-csi-mover', node: 'hyper3', running: false });
      vm.config.set('name', 'pve-nfs-csi-mover');
    },
  },
  {
    reason: 'privileges-unreadable',
    message: /cannot read the Proxmox privileges: Permission check failed/,
    setup: (w) => (w.api.perms = new Error('Permission check failed')),
  },
  {
    reason: 'privileges-missing',
    message:
      /the Proxmox credentials lack VM\.Allocate on \/vms\/9999 \(create and destroy the helper VM\); VM\.Config\.Options on \/vms\/9999 \(give the helper VM its name and description at creation\); VM\.Migrate on \/vms\/9999/,
    setup: (w) =>
      (w.api.perms = {
        '/': {
          'VM.Audit': 1,
          'VM.Config.Disk': 1,
          'Datastore.Audit': 1,
          'Datastore.AllocateSpace': 1,
          'Datastore.Allocate': 1,
        },
      }),
  },
  {
    reason: 'replacement-pv-exists',
    message: /PV pvc-1-hyper2 \(the name move gives the replacement\) already exists/,
    setup: (w) => w.kube.addPv({ metadata: { name: `${OLD_PV}-hyper2` }, spec: {} }),
  },
];

for (const c of cases) {
  t.test(`${c.reason}: refused, nothing changed`, async (t) => {
    fakeClock(t);
    const w = world();
    c.setup?.(w);
    const before = JSON.stringify([...w.kube.pvs.values()]);
    const e = await rejection(c.call ? c.call(w) : startOrResume(w.deps(), w.req));
    t.ok(isRefusal(e, c.reason), `refused for ${c.reason}: ${String(e)}`);
    t.ok(e instanceof RefusedError, 'the command exits 4 on it');
    t.match((e as Error).message, c.message);
    t.same(w.kube.writes, [], 'nothing written to the API server');
    t.equal(JSON.stringify([...w.kube.pvs.values()]), before, 'the PVs as they were');
    t.same(w.api.lifecycle, [], 'no VM made, moved or destroyed');
  });
}

t.test('pv-changed: a PV changed since it was read loses the start', async (t) => {
  fakeClock(t);
  const w = world();
  const plan = await checkMove(w.deps(), w.req);
  await w.kube.patchPv(OLD_PV, { metadata: { labels: { touched: 'yes' } } });
  const e = await rejection(new MoveRun(w.deps(), plan.record).begin(plan.pv.metadata.resourceVersion));
  t.ok(isRefusal(e, 'pv-changed'), String(e));
  t.match(String(e), /PV pvc-1 changed since it was read \(another move of this claim starting\?\); run move again/);
  t.notOk((await w.kube.getPv(OLD_PV))?.metadata.annotations?.['pve-nfs-csi.io/move'], 'no record written');
});

t.test('no-cluster: a region the config has no cluster for', async (t) => {
  const cluster = { url: 'https://pve:8006/api2/json', insecure: false, region: 'homelab' };
  const cfg = { clusters: [cluster, { ...cluster, region: 'lab2' }], controllerVmId: 9999 };
  t.equal(clusterFor(cfg, 'lab2').region, 'lab2');
  t.equal(clusterFor(cfg, undefined).region, 'homelab', 'no Proxmox volume found: the first, whose checks refuse');
  const e = (() => {
    try {
      return clusterFor(cfg, 'other');
    } catch (err) {
      return err;
    }
  })();
  t.ok(isRefusal(e, 'no-cluster'), String(e));
  t.match(String(e), /no Proxmox cluster for region other in the config \(regions: homelab, lab2\)/);
});

t.test("locateMove: the record and its region, or the claim PV's region", async (t) => {
  const w = world();
  t.same(await locateMove(w.kube, w.req), { region: 'homelab' });
  recorded(w);
  const found = await locateMove(w.kube, { ...w.req, toZone: undefined });
  t.equal(found.record?.step, 'holding');
  t.equal(found.region, 'homelab');
  t.same(await locateMove(w.kube, { ...w.req, name: 'nope' }), { region: undefined });
});
