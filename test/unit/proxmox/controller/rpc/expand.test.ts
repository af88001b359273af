// Offline ControllerExpandVolume against the fake Proxmox: the helper VM chosen (stopped before
// running, never the disk's owner), the helper attachment made and removed, the refusal when a
// host has no VM, recovery after a crash between attach and unlink (by the next expand,
// publish, unpublish or delete), and a real publish to the helper VM running at the same time.
import t from 'tap';
import pino from 'pino';
import type * as T from '../../../../../src/csi/types.js';
import { Unavailable } from '../../../../../src/errors.js';
import type { ProxmoxApi } from '../../../../../src/proxmox/api/api.js';
import { GiB } from '../../../../../src/proxmox/controller/params/params.js';
import { helperWwnForSlot, isHelperWwn, wwnForSlot } from '../../../../../src/proxmox/contract.js';
import { present } from '../../../../helpers/present.js';
import { type FakeProxmox, seedCluster } from '../../api/fake-api.js';
import { controllerOn } from '../../fake-controller.js';
import { BLOCK, MOUNT, expandReq, publishReq as controllerPublishReq } from '../../../../helpers/csi-requests.js';
import { outcome as err } from '../../../../helpers/outcome.js';

const ctx = (): T.CallContext => ({ log: pino({ level: 'silent' }), signal: new AbortController().signal });

function setup(f: FakeProxmox = seedCluster()) {
  const c = controllerOn(f);
  const vols = (node = 'hyper2') => f.storageOf(node, 'local-lvm').volumes;
  /** A volume of this driver on a host (hyper2 holds VMs 103 talos-cp-2 and 104 talos-worker-2). */
  const volume = (name: string, node = 'hyper2'): string => {
    vols(node).set(`vm-9999-${name}`, GiB);
    return `homelab/${node}/local-lvm/vm-9999-${name}`;
  };
  const expand = (volumeId: string, bytes: number, cap: T.VolumeCapability = MOUNT, cc = c) =>
    cc.controllerExpandVolume(expandReq(volumeId, bytes, cap), ctx());
  /** Config and pending keys of a VM that reference the disk. */
  const refs = (vmid: number, name: string) => {
    const vm = f.vmOf(vmid);
    return [...vm.config, ...vm.pending].filter(([, v]) => v.includes(`vm-9999-${name}`)).map(([k]) => k);
  };
  const helperSets = () =>
    f.calls
      .filter((x) => x.method === 'updateVmConfig')
      .map((x) => ({ vmid: x.args[1] as number, set: (x.args[2] as { set?: Record<string, string> }).set ?? {} }))
      .filter((x) => Object.values(x.set).some((v) => isHelperWwn(/wwn=(0x[0-9a-f]+)/.exec(v)?.[1])));
  return { f, c, vols, volume, expand, refs, helperSets };
}

const publishReq = (volumeId: string, nodeId: string) =>
  controllerPublishReq(volumeId, nodeId, { storage: 'local-lvm' });

t.test('offline: through a stopped VM when the host has one, then unlinked', async (t) => {
  const { f, vols, volume, expand, refs } = setup();
  f.vmOf(104).running = false;
  const id = volume('pvc-a');
  const r = await expand(id, 2 * GiB);
  t.same(
    r,
    { capacityBytes: String(2 * GiB), nodeExpansionRequired: true },
    'exactly the requested size; the filesystem still needs the node',
  );
  t.equal(vols().get('vm-9999-pvc-a'), 2 * GiB, 'disk grown');
  const set = present(
    f.calls.find((x) => x.method === 'updateVmConfig'),
    'an updateVmConfig call',
  );
  t.same(set.args.slice(0, 2), ['hyper2', 104], 'the stopped VM, though VM 103 has the lower VMID');
  t.same(
    (set.args[2] as { set: Record<string, string> }).set,
    { scsi1: `local-lvm:vm-9999-pvc-a,backup=0,wwn=${helperWwnForSlot(1)}` },
    'helper WWN, backup=0',
  );
  t.same(f.calls.find((x) => x.method === 'resizeDisk')?.args, ['hyper2', 104, 'scsi1', '2048M']);
  t.same(refs(104, 'pvc-a'), [], 'gone from the helper VM again');
  t.same([...f.vmOf(104).pendingDelete], []);
  t.equal(f.slotConflicts, 0);

  f.resetCalls();
  t.same(
    await expand(id, 2 * GiB - 5),
    { capacityBytes: String(2 * GiB), nodeExpansionRequired: true },
    'already big enough: current size',
  );
  t.equal(
    f.count('updateVmConfig') + f.count('resizeDisk') + f.count('unlinkDisks'),
    0,
    'idempotent: nothing attached',
  );
});

t.test('offline: a running VM when none is stopped; never the disk owner; next VM when one is full', async (t) => {
  const { f, vols, volume, expand, refs, helperSets } = setup();
  const id = volume('pvc-b');
  /** The one helper attachment went to this VM, the disk has the size, and the VM holds no reference to it after. */
  const resizedThrough = (vmid: number, bytes: number, why: string) => {
    t.same(
      helperSets().map((x) => x.vmid),
      [vmid],
      why,
    );
    t.equal(vols().get('vm-9999-pvc-b'), bytes);
    t.same(refs(vmid, 'pvc-b'), []);
  };
  t.same(
    await expand(id, 3 * GiB, BLOCK),
    { capacityBytes: String(3 * GiB), nodeExpansionRequired: false },
    'block: no node step',
  );
  resizedThrough(103, 3 * GiB, 'running VMs only: the lowest VMID');

  // VM 103 has every slot taken: the expansion moves on to VM 104.
  for (let s = 1; s <= 30; s++) f.vmOf(103).config.set(`scsi${s}`, `local-lvm:vm-103-disk-${s},wwn=0x1`);
  f.resetCalls();
  await expand(id, 4 * GiB);
  resizedThrough(104, 4 * GiB, 'a full VM is skipped');

  // A disk owned by a VM on the host is never attached to that VM for a resize.
  f.addVm({ vmid: 150, name: 'owner', node: 'hyper3', running: false });
  f.vms.delete(105);
  f.vms.delete(106);
  vols('hyper3').set('vm-150-data', GiB);
  const owned = await err(expand('homelab/hyper3/local-lvm/vm-150-data', 2 * GiB));
  t.match(
    owned,
    { kind: 'FailedPrecondition', message: /belongs to VM owner \(150\)/ },
    'a disk of another VM is never grown (nor attached to its owner for that)',
  );
});

t.test('offline: a host without VMs is refused with what to do', async (t) => {
  const { f, volume, expand } = setup();
  f.addNode('hyper4');
  const id = volume('pvc-c', 'hyper4');
  const e = await err(expand(id, 2 * GiB));
  t.equal(e.kind, 'FailedPrecondition');
  t.match(e.message, /attached to no VM, and host hyper4 has no VM/);
  t.match(
    e.message,
    /create a VM on hyper4 \(a stopped one will do\), or expand the volume while a pod on hyper4 uses it/,
  );
  t.equal(f.count('updateVmConfig') + f.count('resizeDisk'), 0);
  t.match(await err(expand('homelab/hyper2/local-lvm/vm-9999-nope', 2 * GiB)), { kind: 'NotFound' });
});

/** An API that works until `dieAfter` has returned once, then fails every call: the process is gone. */
function crashing(f: FakeProxmox, dieAfter: 'updateVmConfig' | 'resizeDisk'): ProxmoxApi {
  let dead = false;
  return new Proxy(f, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      return async (...args: unknown[]) => {
        if (dead) throw new Unavailable('controller process is gone');
        const out = await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        if (prop === dieAfter) dead = true;
        return out;
      };
    },
  });
}

/** Leaves the helper attachment of a fresh volume on VM 103, as a controller that died would. */
async function leftover(t: Tap, dieAfter: 'updateVmConfig' | 'resizeDisk') {
  const s = setup();
  const id = s.volume('pvc-x');
  const dying = controllerOn(crashing(s.f, dieAfter));
  // Dead after the attach: it was sent and never confirmed, so the volume stays fenced, no
  // other helper VM is tried (fences.ts) and the answer is ABORTED.
  t.equal(
    (await err(s.expand(id, 2 * GiB, MOUNT, dying))).kind,
    dieAfter === 'updateVmConfig' ? 'Aborted' : 'Unavailable',
    'the first controller died mid-expansion',
  );
  t.equal(s.refs(103, 'pvc-x').length, 1, 'its helper attachment is left on VM 103');
  t.ok(
    isHelperWwn(
      /wwn=(0x[0-9a-f]+)/.exec(
        s.f.vmOf(103).config.get(present(s.refs(103, 'pvc-x')[0], 'the helper attachment')) ?? '',
      )?.[1],
    ),
    'recognisable by its WWN',
  );
  s.f.resetCalls();
  return { ...s, id };
}
type Tap = { equal(a: unknown, b: unknown, m: string): unknown; ok(a: unknown, m: string): unknown };

t.test('crash between attach and unlink: the next expansion cleans up and finishes', async (t) => {
  const afterAttach = await leftover(t, 'updateVmConfig');
  t.equal(afterAttach.vols().get('vm-9999-pvc-x'), GiB, 'died before the resize');
  await afterAttach.expand(afterAttach.id, 2 * GiB);
  t.equal(afterAttach.vols().get('vm-9999-pvc-x'), 2 * GiB, 'resized by the retry');
  t.same(afterAttach.refs(103, 'pvc-x'), [], 'nothing left on VM 103');
  t.same(afterAttach.refs(104, 'pvc-x'), []);

  const afterResize = await leftover(t, 'resizeDisk');
  t.equal(afterResize.vols().get('vm-9999-pvc-x'), 2 * GiB, 'died after the resize');
  t.same(await afterResize.expand(afterResize.id, 2 * GiB), {
    capacityBytes: String(2 * GiB),
    nodeExpansionRequired: true,
  });
  t.equal(
    afterResize.f.count('resizeDisk') + afterResize.f.count('updateVmConfig'),
    0,
    'no second resize, no new attachment',
  );
  t.same(afterResize.refs(103, 'pvc-x'), [], 'the leftover was removed on the no-op path');
});

t.test('crash leftover: publish, unpublish and delete remove it', async (t) => {
  const toOther = await leftover(t, 'resizeDisk');
  const got = await toOther.c.controllerGetVolume({ volumeId: toOther.id }, ctx());
  t.same(got.status?.publishedNodeIds, [], 'a helper attachment is not a publish');
  t.match(got.status?.volumeCondition, { abnormal: true, message: /VM talos-cp-2 \(103\) for an offline expansion/ });
  const pub = await toOther.c.controllerPublishVolume(publishReq(toOther.id, 'talos-worker-2'), ctx());
  t.same(toOther.refs(103, 'pvc-x'), [], 'publish elsewhere removed the leftover');
  t.equal(
    toOther.f.vmOf(104).config.get(`scsi${pub.publishContext?.lun}`),
    `local-lvm:vm-9999-pvc-x,backup=0,iothread=1,wwn=${wwnForSlot(Number(pub.publishContext?.lun))}`,
  );

  const toSame = await leftover(t, 'resizeDisk');
  const same = await toSame.c.controllerPublishVolume(publishReq(toSame.id, 'talos-cp-2'), ctx());
  t.same(toSame.refs(103, 'pvc-x'), [`scsi${same.publishContext?.lun}`], 'publish to the helper VM: one attachment…');
  t.match(
    toSame.f.vmOf(103).config.get(`scsi${same.publishContext?.lun}`),
    new RegExp(`wwn=${wwnForSlot(Number(same.publishContext?.lun))}$`),
    '…with the PVC-ID WWN the node looks for',
  );

  const unpub = await leftover(t, 'resizeDisk');
  await unpub.c.controllerUnpublishVolume({ volumeId: unpub.id, nodeId: 'talos-worker-2', secrets: {} }, ctx());
  t.same(unpub.refs(103, 'pvc-x'), [], 'unpublish from another node removed the leftover');
  const unpubAll = await leftover(t, 'resizeDisk');
  await unpubAll.c.controllerUnpublishVolume({ volumeId: unpubAll.id, nodeId: '', secrets: {} }, ctx());
  t.same(unpubAll.refs(103, 'pvc-x'), [], 'unpublish without a node removed it');

  const del = await leftover(t, 'resizeDisk');
  await del.c.deleteVolume({ volumeId: del.id, secrets: {} }, ctx());
  t.same(del.refs(103, 'pvc-x'), [], 'delete removed the leftover…');
  t.notOk(del.vols().has('vm-9999-pvc-x'), '…and freed the disk instead of refusing');

  // A real publish still blocks delete.
  const { c, volume } = setup();
  const id = volume('pvc-y');
  await c.controllerPublishVolume(publishReq(id, 'talos-worker-2'), ctx());
  t.match(await err(c.deleteVolume({ volumeId: id, secrets: {} }, ctx())), {
    kind: 'FailedPrecondition',
    message: /talos-worker-2 \(104\)/,
  });
});

t.test('offline expansion and real publishes to the helper VM at the same time', async (t) => {
  const { f, c, vols, volume, expand, refs, helperSets } = setup();
  f.latencyMs = 3;
  const a = volume('pvc-grow');
  const others = ['pvc-p1', 'pvc-p2', 'pvc-p3'].map((n) => volume(n));
  const [grown, ...pubs] = await Promise.all([
    expand(a, 2 * GiB),
    ...others.map((id) => c.controllerPublishVolume(publishReq(id, 'talos-cp-2'), ctx())),
  ]);
  t.same(grown, { capacityBytes: String(2 * GiB), nodeExpansionRequired: true });
  t.equal(vols().get('vm-9999-pvc-grow'), 2 * GiB);
  t.same(
    helperSets().map((x) => x.vmid),
    [103],
    'the helper was the VM being published to',
  );
  t.equal(f.slotConflicts, 0, 'no slot set over another disk');
  t.ok(f.maxConcurrentWriters <= 1, 'one config writer at a time on the VM');
  const luns = pubs.map((p) => Number(p.publishContext?.lun));
  t.equal(new Set(luns).size, 3, 'distinct slots');
  for (const [i, id] of others.entries()) {
    const name = id.slice(id.lastIndexOf('/') + 1 + 'vm-9999-'.length);
    const lun = present(luns[i], `the lun of ${name}`);
    t.same(refs(103, name), [`scsi${lun}`], `${name} stays attached`);
    t.match(f.vmOf(103).config.get(`scsi${lun}`), new RegExp(`wwn=${wwnForSlot(lun)}$`));
  }
  t.same(refs(103, 'pvc-grow'), [], 'the helper attachment is gone');
});
