// Offline ControllerExpandVolume against the Proxmox VE simulator over HTTPS: through a stopped
// VM when the host has one, else a running one; a helper attachment stranded by failed unlinks
// is removed by the next delete; with the `loop` backend (root), the running helper's loop
// device comes and goes and the image file grows.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { isCsiError } from '../../../src/errors.js';
import { GiB } from '../../../src/proxmox/controller/params/params.js';
import { helperWwnForSlot } from '../../../src/proxmox/contract.js';
import { callCtx as ctx, createReq, expandReq } from '../../helpers/csi-requests.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import type { Teardown } from '../../helpers/teardown.js';
import { present } from '../../helpers/present.js';
import { createdId } from '../../helpers/created.js';

const RESIZE = 'PUT /nodes/{node}/qemu/{vmid}/resize';
const UNLINK = 'PUT /nodes/{node}/qemu/{vmid}/unlink';
/** The synchronous config update: an unlink sent with a digest (api.ts unlinkDisks). */
const PUT_CONFIG = 'PUT /nodes/{node}/qemu/{vmid}/config';

async function start(
  t: Teardown,
  backend: 'none' | 'loop',
  helpers: { kubernetesNodes?: string[]; expansionHelpers?: string[] } = {},
) {
  const s = await startProxmoxOnSim(t, {
    sim: { backend },
    controller: {
      ...(helpers.expansionHelpers && { cluster: { expansionHelpers: helpers.expansionHelpers } }),
      tuning: { cacheTtlMs: 0 },
      ...(helpers.kubernetesNodes && { kubernetesNodes: async () => new Set(helpers.kubernetesNodes) }),
    },
  });
  const { admin, c, state } = s;
  /** Keys of every VM config/pending entry that mention the disk. */
  const mentions = async (disk: string) =>
    (await state()).vms.flatMap((vm) =>
      [...Object.entries(vm.config), ...Object.entries(vm.pending)]
        .filter(([, v]) => v.includes(disk))
        .map(([k]) => `${vm.vmid}:${k}`)
        .concat(vm.pendingDelete.length ? [`${vm.vmid}:pendingDelete`] : []),
    );
  const create = async (name: string) => await createdId(c.createVolume(createReq(name), ctx()));
  const expand = (volumeId: string, bytes: number) => c.controllerExpandVolume(expandReq(volumeId, bytes), ctx());
  const resizedThrough = async () =>
    (await admin.requests()).entries
      .filter((e) => e.route === RESIZE && e.status === 200)
      .map((e) => /\/qemu\/(\d+)\//.exec(e.path)?.[1]);
  return { ...s, mentions, create, expand, resizedThrough };
}

t.test('offline expansion over HTTPS: stopped VM first, else running; nothing left behind', async (t) => {
  const { admin, c, mentions, create, expand, resizedThrough } = await start(t, 'none');
  const id = await create('pvc-off');
  await admin.patchVm(111, { status: 'stopped' });
  await admin.resetCounters();
  t.same(await expand(id, 2 * GiB), { capacityBytes: String(2 * GiB), nodeExpansionRequired: true });
  t.same(await resizedThrough(), ['111'], 'resized through the stopped talos-worker-1 (111), not talos-cp-1 (101)');
  const set = (await admin.requests()).entries.find((e) => e.route === 'POST /nodes/{node}/qemu/{vmid}/config');
  t.match(
    set?.params?.scsi1,
    new RegExp(`^local-lvm:vm-9999-pvc-off,backup=0,wwn=${helperWwnForSlot(1)}$`),
    'helper drive string sent',
  );
  t.same(await mentions('vm-9999-pvc-off'), [], 'gone from every VM config and pending section');
  t.equal((await c.controllerGetVolume({ volumeId: id }, ctx())).volume?.capacityBytes, String(2 * GiB));

  await admin.patchVm(111, { status: 'running' });
  await admin.resetCounters();
  await expand(id, 3 * GiB);
  t.same(await resizedThrough(), ['101'], 'all running: the lowest VMID');
  t.same(await mentions('vm-9999-pvc-off'), []);
  await admin.resetCounters();
  t.same(await expand(id, 3 * GiB), { capacityBytes: String(3 * GiB), nodeExpansionRequired: true }, 'idempotent');
  t.equal((await admin.counters()).byRoute[RESIZE], undefined, 'no resize the second time');
  await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
});

t.test('a helper attachment stranded by failed unlinks is removed by the next call', async (t) => {
  const { admin, c, mentions, create, expand } = await start(t, 'none');
  const id = await create('pvc-strand');
  await admin.patchFaults({ dropRate: 1, dropPhase: 'before', dropRoutes: [UNLINK, PUT_CONFIG] });
  const failed = await expand(id, 2 * GiB).then(
    () => 'ok',
    (e: unknown) => (isCsiError(e) ? e.kind : String(e)),
  );
  t.equal(failed, 'Unavailable', 'the unlink never got through');
  t.same(await mentions('vm-9999-pvc-strand'), ['101:scsi1'], 'the helper attachment is stranded on talos-cp-1');
  const cond = await c.controllerGetVolume({ volumeId: id }, ctx());
  t.equal(cond.status?.volumeCondition?.abnormal, true, 'reported');
  await admin.patchFaults({ dropRate: 0 });
  await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
  t.same(await mentions('vm-9999-pvc-strand'), [], 'delete removed it…');
  t.same((await c.listVolumes({ maxEntries: 0, startingToken: '' }, ctx())).entries, [], '…and freed the disk');
});

const notRoot = process.getuid?.() !== 0 ? 'needs root (losetup) for the loop backend' : false;

t.test(
  'loop backend: the running helper gets a loop device for the resize, then loses it',
  { skip: notRoot },
  async (t) => {
    const { sim, state, mentions, create, expand, resizedThrough, c } = await start(t, 'loop');
    const id = await create('pvc-loop');
    t.same(await expand(id, 2 * GiB), { capacityBytes: String(2 * GiB), nodeExpansionRequired: true });
    t.same(await resizedThrough(), ['101'], 'through the running talos-cp-1');
    const vol = present(
      (await state()).nodes
        .find((n) => n.name === 'hyper1')
        ?.storages[0]?.volumes.find((v) => v.volid === 'local-lvm:vm-9999-pvc-loop'),
      'local-lvm:vm-9999-pvc-loop in the simulator',
    );
    t.equal(fs.statSync(present(vol.file, 'its image file')).size, 2 * GiB, 'the image file grew');
    t.same(await mentions('vm-9999-pvc-loop'), []);
    t.same(
      (await state()).vms.flatMap((vm) => Object.keys(vm.loopDevices ?? {})),
      [],
      'no disk plugged into any VM',
    );
    t.notMatch(execFileSync('losetup', ['-a'], { encoding: 'utf8' }), sim.stateDir, 'no loop device on the image');
    t.same(
      fs.readdirSync(sim.loopLinkDir).filter((d) => fs.readdirSync(`${sim.loopLinkDir}/${d}`).length > 0),
      [],
      'no wwn link left',
    );
    await c.deleteVolume({ volumeId: id, secrets: {} }, ctx());
  },
);

t.test("helpers are only the cluster's own node VMs: Kubernetes Node names, or the configured list", async (t) => {
  await t.test('a stopped VM that is no Kubernetes node is never borrowed', async (t) => {
    const { admin, create, expand, resizedThrough, mentions } = await start(t, 'none', {
      kubernetesNodes: ['talos-cp-1', 'talos-cp-2', 'talos-worker-2'],
    });
    const id = await create('pvc-nodes-only');
    await admin.patchVm(111, { status: 'stopped' }); // would be the first choice if any VM would do
    await admin.resetCounters();
    await expand(id, 2 * GiB);
    t.same(await resizedThrough(), ['101'], 'through talos-cp-1, a node, although 111 is stopped');
    t.same(await mentions('vm-9999-pvc-nodes-only'), []);
  });
  await t.test('no node VM on the host: a clear refusal, nothing touched', async (t) => {
    const { admin, create, expand, mentions } = await start(t, 'none', { kubernetesNodes: ['talos-worker-2'] });
    const id = await create('pvc-no-helper');
    await admin.resetCounters();
    const err = await expand(id, 2 * GiB).catch((e: unknown) => e);
    t.ok(isCsiError(err, 'FailedPrecondition'), 'FailedPrecondition');
    t.match(
      (err as Error).message,
      /host hyper1 runs none of the cluster's node VMs \(talos-worker-2\).*expansion_helpers/,
    );
    t.same(
      (await admin.requests()).entries.filter((e) => e.method !== 'GET').map((e) => e.route),
      [],
      'no change sent to Proxmox',
    );
    t.same(await mentions('vm-9999-pvc-no-helper'), []);
  });
  await t.test('expansion_helpers in the config wins over the Kubernetes names', async (t) => {
    const { create, expand, resizedThrough, admin } = await start(t, 'none', {
      kubernetesNodes: ['talos-cp-1'],
      expansionHelpers: ['talos-worker-1'],
    });
    const id = await create('pvc-listed');
    await admin.resetCounters();
    await expand(id, 2 * GiB);
    t.same(await resizedThrough(), ['111'], 'through the listed talos-worker-1, running');
  });
});
