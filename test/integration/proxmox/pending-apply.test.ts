// A config change of a stopped VM makes Proxmox apply that VM's whole pending section
// (qemu-server update_vm_api → vmconfig_apply_pending; the simulator does the same): the driver
// must not publish to or unpublish from a stopped VM holding pending changes it did not make,
// since its change would apply them (docs/ownership.md, "Pending changes of others"). Found by
// the ownership property search (a hand-set pending scsi1 of a stopped VM applied by a publish).
import t from 'tap';
import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_CONFIG_PATH } from '../../../sim/index.js';
import { callCtx as ctx, capacity, createReq, preferZone, publishReq } from '../../helpers/csi-requests.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';
import { present } from '../../helpers/present.js';
import type { Teardown } from '../../helpers/teardown.js';
import { wwnForSlot } from '../../../src/proxmox/contract.js';

const HAND_SET = 'local-lvm:vm-131-disk-1,size=1G';

async function start(t: Teardown, status: 'stopped' | 'running', pending: Record<string, string>) {
  const config = parseYaml(fs.readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as {
    nodes: Array<{ name: string; vms: unknown[] }>;
  };
  present(
    config.nodes.find((n) => n.name === 'hyper1'),
    'hyper1',
  ).vms.push({
    vmid: 131,
    name: 'talos-worker-9',
    scsihw: 'virtio-scsi-single',
    memory: 2048,
    cores: 2,
    status,
    bootDisk: { storage: 'local-lvm', size: '8G' },
    pending,
  });
  const s = await startProxmoxOnSim(t, { sim: { config } });
  const vm131 = async () =>
    present(
      (await s.state()).vms.find((v) => v.vmid === 131),
      'VM 131',
    );
  const volume = present(
    (
      await s.c.createVolume(
        createReq('pvc-pending', { capacityRange: capacity(2 ** 30), accessibilityRequirements: preferZone('hyper1') }),
        ctx(),
      )
    ).volume?.volumeId,
    'volume',
  );
  return { ...s, vm131, volume };
}

t.test('a stopped VM with a pending change of others: publish refused, nothing applied', async (t) => {
  const s = await start(t, 'stopped', { scsi1: HAND_SET });
  const before = await s.vm131();
  await t.rejects(s.c.controllerPublishVolume(publishReq(s.volume, 'talos-worker-9'), ctx()), {
    kind: 'FailedPrecondition',
    message: /stopped and has pending changes this change does not make \(scsi1\).*Start the VM/,
  });
  const after = await s.vm131();
  t.same(after.pending, before.pending, 'the pending scsi1 is still pending');
  t.same(after.config, before.config, 'the config is unchanged');
});

t.test('a pending line that only looks like the driver’s (its slot and WWN) is refused too', async (t) => {
  // Found by the property search (seed 31337): an offline expansion's attach to a stopped helper
  // VM applied a hand-set pending scsi1 naming VM 101's disk with the driver's WWN scheme.
  const s = await start(t, 'stopped', { scsi1: `local-lvm:vm-101-disk-1,size=1G,wwn=${wwnForSlot(1)}` });
  const before = await s.vm131();
  await t.rejects(s.c.controllerPublishVolume(publishReq(s.volume, 'talos-worker-9'), ctx()), {
    kind: 'FailedPrecondition',
    message: /pending changes this change does not make \(scsi1\)/,
  });
  t.same((await s.vm131()).config, before.config, 'the config is unchanged');
});

t.test('the same VM running: Proxmox hot-plugs the pending section as any edit does; publish goes ahead', async (t) => {
  const s = await start(t, 'running', { memory: '4096' });
  const pub = await s.c.controllerPublishVolume(publishReq(s.volume, 'talos-worker-9'), ctx());
  t.ok(pub.publishContext, 'published');
});

t.test('a stopped VM with no pending changes is published to', async (t) => {
  const s = await start(t, 'stopped', {});
  const pub = await s.c.controllerPublishVolume(publishReq(s.volume, 'talos-worker-9'), ctx());
  t.ok(pub.publishContext, 'published');
  const cfg = (await s.vm131()).config;
  t.ok(
    Object.values(cfg).some((v) => v.includes('pvc-pending')),
    'attached',
  );
});
