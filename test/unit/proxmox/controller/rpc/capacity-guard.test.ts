// The thin-pool guard through the controller's RPCs, on a fake Proxmox whose pools fill the way
// LVM-thin does: allocating a volume writes nothing, a guest writing into it fills the pool.
import t from 'tap';
import pino from 'pino';
import { createProxmoxController } from '../../../../../src/proxmox/controller/controller.js';
import type { PoolGuardSettings } from '../../../../../src/proxmox/controller/safety/pool-guard.js';
import { GiB } from '../../../../../src/proxmox/controller/params/params.js';
import { FakeProxmox } from '../../api/fake-api.js';
import { callCtx, capacity, createReq, expandReq, zone } from '../../../../helpers/csi-requests.js';
import { outcome } from '../../../../helpers/outcome.js';
import { implemented, CONTROLLER_METHODS } from '../../../../helpers/implemented.js';

function setup(poolGuard: PoolGuardSettings = { enabled: true, maxFill: 0.9, maxOvercommit: 0 }, cacheTtlMs = 0) {
  const f = new FakeProxmox();
  for (const host of ['hyper1', 'hyper2']) f.addNode(host, { 'local-lvm': { size: 100 * GiB, written: new Map() } });
  f.addVm({ vmid: 101, name: 'talos-1', node: 'hyper1' });
  f.addVm({ vmid: 102, name: 'talos-2', node: 'hyper2' });
  const c = implemented(
    createProxmoxController({
      config: {
        clusters: [{ url: 'https://unused', insecure: false, tokenId: 'a@pve!b', tokenSecret: 'x', region: 'homelab' }],
        controllerVmId: 9999,
      },
      log: pino({ level: 'silent' }),
      api: () => f,
      // 0: every cached read is fresh, the test changes the pool between calls.
      tuning: { cacheTtlMs, queue: { confirmTimeoutMs: 200 } },
      poolGuard,
    }),
    CONTROLLER_METHODS,
  );
  return { f, c };
}

const on = (host: string, name: string, bytes: number, zones = [host]) =>
  createReq(name, {
    capacityRange: capacity(bytes),
    accessibilityRequirements: { requisite: zones.map((z) => zone(z)), preferred: [zone(host)] },
  });
const cap = async (c: ReturnType<typeof setup>['c'], host: string) =>
  Number(
    (
      await c.getCapacity(
        { volumeCapabilities: [], parameters: { storage: 'local-lvm' }, accessibleTopology: zone(host) },
        callCtx(),
      )
    ).availableCapacity,
  );

t.test('a pool filled by writes: GetCapacity shrinks, then CreateVolume is refused', async (t) => {
  const { f, c } = setup();
  t.equal(await cap(c, 'hyper1'), 90 * GiB, 'empty pool: 90 % of it');
  // Three 20 GiB volumes and the 32 GiB boot disk: 92 GiB allocated, nothing written.
  for (const n of [1, 2, 3]) await c.createVolume(on('hyper1', `pvc-${n}`, 20 * GiB), callCtx());
  t.equal(await cap(c, 'hyper1'), 90 * GiB, 'allocation alone fills nothing');
  f.write('hyper1', 'local-lvm', 'vm-101-disk-0', 30 * GiB);
  f.write('hyper1', 'local-lvm', 'vm-9999-pvc-1', 20 * GiB);
  f.write('hyper1', 'local-lvm', 'vm-9999-pvc-2', 15 * GiB);
  t.equal(await cap(c, 'hyper1'), 25 * GiB, 'written 65 GiB: 25 GiB left under 90 %');

  const refused = await outcome(c.createVolume(on('hyper1', 'pvc-big', 30 * GiB), callCtx()));
  t.match(refused, { kind: 'ResourceExhausted' });
  t.match(refused.message, /storage local-lvm on host hyper1 \(cluster homelab\)/);
  t.match(refused.message, /65\.0 GiB of 100\.0 GiB written/);
  t.match(refused.message, /--pool-max-fill/);
  t.equal(f.count('allocDisk'), 3, 'nothing allocated for the refused claim');

  t.ok(await c.createVolume(on('hyper1', 'pvc-fits', 25 * GiB), callCtx()), 'what GetCapacity reports still fits');
  // A retry of a volume that exists is answered, whatever the pool: it costs nothing more.
  const again = await c.createVolume(on('hyper1', 'pvc-1', 20 * GiB), callCtx());
  t.equal(again.volume?.volumeId, 'homelab/hyper1/local-lvm/vm-9999-pvc-1');
});

t.test('a refused host is skipped for another the claim allows', async (t) => {
  const { f, c } = setup();
  f.write('hyper1', 'local-lvm', 'vm-101-disk-0', 32 * GiB);
  await c.createVolume(on('hyper1', 'pvc-full', 50 * GiB), callCtx());
  f.write('hyper1', 'local-lvm', 'vm-9999-pvc-full', 50 * GiB);
  const r = await c.createVolume(on('hyper1', 'pvc-next', 10 * GiB, ['hyper1', 'hyper2']), callCtx());
  t.equal(r.volume?.volumeId, 'homelab/hyper2/local-lvm/vm-9999-pvc-next', 'placed on hyper2');
});

t.test('ControllerExpandVolume: the growth is what counts', async (t) => {
  const { f, c } = setup();
  const id = (await c.createVolume(on('hyper1', 'pvc-x', 20 * GiB), callCtx())).volume?.volumeId ?? '';
  f.write('hyper1', 'local-lvm', 'vm-9999-pvc-x', 20 * GiB);
  f.write('hyper1', 'local-lvm', 'vm-101-disk-0', 32 * GiB);
  // 52 GiB written: 38 GiB of growth allowed, 40 not.
  const refused = await outcome(c.controllerExpandVolume(expandReq(id, 60 * GiB), callCtx()));
  t.match(refused, { kind: 'ResourceExhausted' });
  t.match(refused.message, /ControllerExpandVolume local-lvm:vm-9999-pvc-x refused by the thin-pool guard/);
  t.equal(f.count('resizeDisk'), 0, 'nothing resized');
});

t.test('over-commit limit, and the off switch', async (t) => {
  const limited = setup({ enabled: true, maxFill: 0.9, maxOvercommit: 1 });
  // 32 GiB boot disk + 60 GiB: 92 of 100 GiB provisioned; 10 more passes 1.0.
  await limited.c.createVolume(on('hyper1', 'pvc-a', 60 * GiB), callCtx());
  t.equal(await cap(limited.c, 'hyper1'), 8 * GiB);
  t.match(await outcome(limited.c.createVolume(on('hyper1', 'pvc-b', 10 * GiB), callCtx())), {
    kind: 'ResourceExhausted',
    message: /over-commit 0\.92.*--pool-max-overcommit/,
  });
  const off = setup({ enabled: false, maxFill: 0.9, maxOvercommit: 1 });
  off.f.write('hyper1', 'local-lvm', 'vm-101-disk-0', 32 * GiB);
  await off.c.createVolume(on('hyper1', 'pvc-a', 60 * GiB), callCtx());
  off.f.write('hyper1', 'local-lvm', 'vm-9999-pvc-a', 60 * GiB);
  t.ok(await off.c.createVolume(on('hyper1', 'pvc-b', 50 * GiB), callCtx()), 'guard off: allowed');
  t.equal(await cap(off.c, 'hyper1'), 8 * GiB, "guard off: GetCapacity is Proxmox's avail");
});

// Guests fill a pool between two creates far faster than any cache TTL: the fill a create is
// judged against is read when it is judged, not reused from the last create or GetCapacity.
t.test('CreateVolume judges the fill written since the last read, however warm the caches', async (t) => {
  const { f, c } = setup(undefined, 60_000);
  t.equal(await cap(c, 'hyper1'), 90 * GiB, 'empty pool: 90 % of it');
  await c.createVolume(on('hyper1', 'pvc-a', 20 * GiB), callCtx());
  f.write('hyper1', 'local-lvm', 'vm-101-disk-0', 32 * GiB);
  f.write('hyper1', 'local-lvm', 'vm-9999-pvc-a', 20 * GiB);
  // 52 GiB written within the TTL: 38 GiB allowed, a 50 GiB claim is not.
  const refused = await outcome(c.createVolume(on('hyper1', 'pvc-b', 50 * GiB), callCtx()));
  t.match(refused, { kind: 'ResourceExhausted', message: /52\.0 GiB of 100\.0 GiB written/ });
  t.equal(f.count('allocDisk'), 1, 'nothing allocated for the refused claim');
});
