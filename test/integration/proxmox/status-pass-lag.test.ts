// Proxmox lists a VM created a moment ago in /cluster/resources without its name (status
// `unknown`, no template flag) until pvestatd's next pass, up to 10 s later: those fields come
// from pvestatd's status data (pve-manager's extract_vm_stats). The pve-real tier found the
// controller refusing its own copy VM right after creating it ("VM  (<vmid>) is not a copy VM of
// this driver"). Here the simulator never names the new helper VMs during the test
// (statusPassReads), so every decision about them must come from their config and record.
import t from 'tap';
import { callCtx as ctx, createReq } from '../../helpers/csi-requests.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import { snapshotSimConfig } from '../../helpers/snapshot-sim-config.js';
import { present } from '../../helpers/present.js';
import { outcome } from '../../helpers/outcome.js';

t.test('helper VMs listed without a name are judged by their config', async (t) => {
  const s = await startProxmoxOnSim(t, {
    sim: { config: snapshotSimConfig(), faults: { statusPassReads: 1_000_000 } },
  });
  const src = present((await s.c.createVolume(createReq('pvc-src'), ctx())).volume?.volumeId, 'source');
  const req = { name: 'snap-1', sourceVolumeId: src, secrets: {}, parameters: {} };
  const first = await outcome(s.c.createSnapshot(req, ctx()));
  t.match(first, { kind: 'ok' }, 'CreateSnapshot succeeds while its copy VM is listed without a name');
  const snap = present((await s.c.createSnapshot(req, ctx())).snapshot?.snapshotId, 'snapshot (idempotent)');
  const listed = await s.c.listSnapshots(
    { snapshotId: '', sourceVolumeId: '', maxEntries: 0, startingToken: '', secrets: {} },
    ctx(),
  );
  t.ok(
    (listed.entries ?? []).some((e) => e.snapshot?.snapshotId === snap),
    'ListSnapshots finds the snapshot VM by its config',
  );
  const restored = present(
    (
      await s.c.createVolume(
        createReq('pvc-restored', { volumeContentSource: { snapshot: { snapshotId: snap } } }),
        ctx(),
      )
    ).volume?.volumeId,
    'restored',
  );
  const cloned = present(
    (await s.c.createVolume(createReq('pvc-cloned', { volumeContentSource: { volume: { volumeId: src } } }), ctx()))
      .volume?.volumeId,
    'cloned',
  );
  for (const id of [restored, cloned])
    t.match(await outcome(s.c.deleteVolume({ volumeId: id, secrets: {} }, ctx())), { kind: 'ok' }, `delete ${id}`);
  t.match(
    await outcome(s.c.deleteSnapshot({ snapshotId: snap, secrets: {} }, ctx())),
    { kind: 'ok' },
    'DeleteSnapshot',
  );
  t.same(
    (await s.state()).vms.filter((v) => v.name?.startsWith('pve-nfs-csi-')).map((v) => v.name),
    [],
    'no helper VM is left',
  );
});
