// DeleteVolume of a restored volume, then the same DeleteVolume again (the PV controller's retry
// after an answer it lost, or a restarted controller's): the second answers OK at once. The
// chaos suite's snapshot phase found it answering FAILED_PRECONDITION ("its owner VM does not
// exist") for the storage-content cache's TTL: the free of the volume VM's disk did not tell the
// cache, so the retry took the freed disk for an orphan that still exists.
import t from 'tap';
import { callCtx as ctx, createReq } from '../../helpers/csi-requests.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import { snapshotSimConfig } from '../../helpers/snapshot-sim-config.js';
import { present } from '../../helpers/present.js';
import { outcomeText } from '../../helpers/outcome.js';

t.test('a second DeleteVolume of a restored volume answers OK', async (t) => {
  const s = await startProxmoxOnSim(t, { sim: { config: snapshotSimConfig() } });
  const src = present((await s.c.createVolume(createReq('pvc-src'), ctx())).volume?.volumeId, 'source');
  const snap = present(
    (await s.c.createSnapshot({ name: 'snap-1', sourceVolumeId: src, secrets: {}, parameters: {} }, ctx())).snapshot
      ?.snapshotId,
    'snapshot',
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
  // A read of the storage's content after the restore, as a publish or a list would make.
  await s.c.listVolumes({ maxEntries: 0, startingToken: '' }, ctx());
  t.equal(await outcomeText(s.c.deleteVolume({ volumeId: restored, secrets: {} }, ctx())), 'no error');
  t.equal(
    await outcomeText(s.c.deleteVolume({ volumeId: restored, secrets: {} }, ctx())),
    'no error',
    'the retry answers OK (the disk is gone, not an orphan)',
  );
  t.notOk(
    (await s.state()).vms.some((v) => v.name === 'pve-nfs-csi-volume'),
    'no volume VM is left',
  );
});
