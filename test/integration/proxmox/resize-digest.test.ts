// Regression: an expansion never resizes a disk that took the slot after the controller read the
// VM's config. An online expansion reads every VM on the host (which scsiN holds the volume),
// then resizes that key of that VM; another writer (another replica, an admin) takes the volume
// out of the slot and puts another disk into it in between. The resize carries the read's
// digest, so Proxmox refuses it (`checksum mismatch (file change by other user?)`, the resize
// task's exit status) and the controller reads again. Before the digest, the resize grew the
// other disk and the expansion answered OK for a volume it had not grown.
import t from 'tap';
import { createHttpProxmoxApi } from '../../../src/proxmox/api/http-api.js';
import { GiB } from '../../../src/proxmox/controller/params/params.js';
import { parseVolumeId } from '../../../src/proxmox/volume-id.js';
import { callCtx as ctx, createReq, expandReq, publishReq } from '../../helpers/csi-requests.js';
import { createdId } from '../../helpers/created.js';
import { outcome } from '../../helpers/outcome.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import { swapSlotAfterRead } from '../../helpers/slot-swap.js';

const VM = { name: 'talos-worker-1', vmid: 111, node: 'hyper1' };
const RESIZE = 'PUT /nodes/{node}/qemu/{vmid}/resize';

t.test('a slot taken by another disk since the read is never resized', async (t) => {
  const { admin, c, cluster, state } = await startProxmoxOnSim(t, {
    controller: { tuning: { startupFenceMs: 0, cacheTtlMs: 0 } },
  });
  const other = createHttpProxmoxApi({ cluster });
  t.teardown(() => other.close());
  const a = await createdId(c.createVolume(createReq('pvc-rdigest-a'), ctx()));
  const b = await createdId(c.createVolume(createReq('pvc-rdigest-b'), ctx()));
  const published = await c.controllerPublishVolume(publishReq(a, VM.name), ctx());
  const key = `scsi${published.publishContext?.lun ?? '?'}`;
  const diskB = parseVolumeId(b)?.disk ?? 'b?';
  const sizeOf = async (disk: string) =>
    (await state()).nodes
      .flatMap((n) => n.storages.flatMap((s) => s.volumes))
      .find((v) => v.volid === `local-lvm:${disk}`)?.size;

  // The controller's resize arrives at Proxmox only after the swap.
  await admin.patchFaults({ latencyByRoute: { [RESIZE]: 600 } });
  const mark = (await admin.requests()).lastSeq;
  const expand = outcome(c.controllerExpandVolume(expandReq(a, 2 * GiB), ctx()));
  await swapSlotAfterRead({ admin, other, vm: VM, since: mark, key, volid: `local-lvm:${diskB}` });

  const r = await expand;
  await admin.patchFaults({ latencyByRoute: {} });
  t.equal(await sizeOf(diskB), GiB, 'the disk now in the slot kept its size');
  t.not(r.kind, 'ok', `no success for a volume that was not grown (${r.kind}: ${r.message})`);
  t.equal(r.kind, 'Aborted', 'ABORTED: the VM changed under the expansion; the CO retries');
  const refused = (await admin.requests(mark)).entries.filter((e) => e.route === RESIZE);
  t.ok(
    refused.length >= 1 && refused.every((e) => typeof e.params?.digest === 'string' && e.params.digest.length === 40),
    'every resize carried the digest of the config it was planned on',
  );
});
