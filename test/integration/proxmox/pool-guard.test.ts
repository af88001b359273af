// The thin-pool guard against the simulator, on pools that fill the way LVM-thin pools do: a new
// volume allocates nothing, a guest's writes fill the pool (admin POST /write). Both backends:
// `none` counts written bytes, `loop` writes real data into the volume's sparse file and the
// storage status counts its allocated blocks (st_blocks), as `lvs` reports data_percent.
import t from 'tap';
import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { MiB } from '../../../src/proxmox/controller/params/params.js';
import { DEFAULT_CONFIG_PATH } from '../../../sim/index.js';
import { callCtx as ctx, capacity, createReq, expandReq, zone } from '../../helpers/csi-requests.js';
import { outcome } from '../../helpers/outcome.js';
import { startProxmoxOnSim } from '../../helpers/proxmox-on-sim.js';

/** What the backing file's filesystem may add to the data (`loop`: st_blocks counts its metadata). */
const SLACK = 64 * 1024;

interface Cfg {
  nodes: Array<{ name: string; storages: Array<{ id: string; size: string; used: string }> }>;
}

/** hyper1's local-lvm is a 1 GiB pool with nothing written: every figure below is exact. */
function smallPool(): Cfg {
  const config = parseYaml(fs.readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as Cfg;
  for (const s of config.nodes.find((n) => n.name === 'hyper1')?.storages ?? []) {
    s.size = '1G';
    s.used = '0';
  }
  return config;
}

const on = (name: string, bytes: number, zones = ['hyper1']) =>
  createReq(name, {
    capacityRange: capacity(bytes),
    accessibilityRequirements: { requisite: zones.map((z) => zone(z)), preferred: [zone(zones[0] ?? 'hyper1')] },
  });

for (const backend of ['none', 'loop'] as const) {
  t.test(`backend ${backend}: GetCapacity shrinks as the pool fills, then the guard refuses`, async (t) => {
    const { c, admin } = await startProxmoxOnSim(t, {
      sim: { backend, config: smallPool() },
      controller: { tuning: { cacheTtlMs: 0 } },
    });
    const capacityOf = async (host: string) =>
      Number(
        (
          await c.getCapacity(
            { volumeCapabilities: [], parameters: { storage: 'local-lvm' }, accessibleTopology: zone(host) },
            ctx(),
          )
        ).availableCapacity,
      );
    const full = Math.floor(0.9 * 1024 * MiB);
    t.equal(await capacityOf('hyper1'), full, 'empty: 90 % of the pool');
    const a = (await c.createVolume(on('pvc-a', 512 * MiB), ctx())).volume?.volumeId ?? '';
    await c.createVolume(on('pvc-b', 512 * MiB), ctx());
    t.equal(await capacityOf('hyper1'), full, 'two empty volumes fill nothing');

    const w = await admin.write({ node: 'hyper1', storage: 'local-lvm', volume: 'vm-9999-pvc-a', bytes: 512 * MiB });
    // A real file may take a block or two of metadata beyond its data (the host filesystem's extents).
    const near = (got: number, want: number, what: string) =>
      t.ok(got >= want - SLACK && got <= want + SLACK, `${what}: ${got} (want ${want})`);
    near(w.bytesInPool, 512 * MiB, 'the guest wrote 512 MiB into the pool');
    near(await capacityOf('hyper1'), full - 512 * MiB, 'GetCapacity shrank by what was written');

    const refused = await outcome(c.createVolume(on('pvc-c', 512 * MiB), ctx()));
    t.equal(refused.kind, 'ResourceExhausted', 'RESOURCE_EXHAUSTED');
    t.match(refused.message, /storage local-lvm on host hyper1 \(cluster homelab\) has 0\.5 GiB of 1\.0 GiB written/);
    t.match(refused.message, /proxmox\.poolGuard\.maxFillPercent/);
    const moved = await c.createVolume(on('pvc-c', 512 * MiB, ['hyper1', 'hyper2']), ctx());
    t.equal(moved.volume?.volumeId, 'homelab/hyper2/local-lvm/vm-9999-pvc-c', 'a claim that allows hyper2 goes there');

    t.match(await outcome(c.controllerExpandVolume(expandReq(a, 1024 * MiB), ctx())), {
      kind: 'ResourceExhausted',
      message: /ControllerExpandVolume local-lvm:vm-9999-pvc-a refused/,
    });
    // Freeing the written volume gives its blocks back to the pool.
    await c.deleteVolume({ volumeId: a, secrets: {} }, ctx());
    t.equal(await capacityOf('hyper1'), full, 'freed: the pool is empty again');
  });
}
