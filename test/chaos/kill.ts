// Scenario 2, kill -9: the controller is killed with SIGKILL in the middle of an attach storm,
// a detach storm, offline expansions and DeleteVolume calls, started again, and every request
// is replayed (the sidecars' retries, then once more from the top) until it has its answer.
// After each phase the simulator must show exactly what the answers said: each volume on its
// VM once, or nowhere; grown; gone. One phase kills the controller while its attaches wait for
// a VM lock held by someone else, and the restarted one is asked to publish the same volumes to
// another VM (the pod moved): the dead process's change lands later, so the new one must refuse.
import { defined } from '../../src/defined.js';
import { holders, volidOfDrive, type SimState } from './audit.js';
import { BASE_FAULTS, GiB, SINGLE_WRITER, singleWriterVolume, type ChaosEnv } from './env.js';
import { type Recorder, pool, sleep, strikeAt, volumeIdOf, type Answer } from './rpc.js';
import { startProxmoxScenario } from './scenario.js';

export async function killScenario(env: ChaosEnv): Promise<Recorder> {
  const { admin, long } = env;
  // Slow enough that a kill lands between a request and its answer.
  const scenario = await startProxmoxScenario(env, '2 kill -9 controller + replay', 'kill', { latencyMs: 25 });
  const { rec, prog, csi } = scenario;
  const vm = { name: 'talos-worker-1', vmid: 111 };
  const n = long ? 24 : 10;
  const rounds = long ? 3 : 1;
  const opts = { deadlineMs: 15_000, budgetMs: 90_000, backoffStartMs: 100, backoffMaxMs: 1000 };

  /** Calls `call` for every volume, kills the controller after `killMs`, restarts it; then replays them all. */
  const storm = async (what: string, vols: string[], call: (volumeId: string) => Promise<Answer>, killMs: number) => {
    const batch = Promise.all(vols.map(call));
    const killer = (async () => {
      await strikeAt(rec, killMs, vols.length);
      const cut = rec.inflight;
      await prog.kill9();
      rec.fault('kill-9');
      rec.fault('calls cut', cut);
      // A kill that lands after every call was answered tests nothing (the NFS scenario's faults
      // had that happen unnoticed): it must cut at least one call.
      if (cut === 0)
        rec.violate(
          `${what}: the kill (planned at ${killMs} ms) cut no call; the scenario would not test what it says`,
        );
      await sleep(100);
      await prog.start();
    })();
    const first = await batch;
    await killer;
    const replay = await Promise.all(vols.map(call));
    [...first, ...replay].forEach((a) => {
      if (a.code !== 'OK') rec.violate(`${what}: final answer ${a.code} ${a.message.slice(0, 200)}`);
    });
  };

  const names = Array.from({ length: n }, (_, i) => `pvc-chaos-kill-${String(i).padStart(2, '0')}`);
  const ids: string[] = [];
  await pool(names, 8, async (name, i) => {
    const a = await csi.op('controller', 'CreateVolume', singleWriterVolume(name, 'hyper1'), {
      ...opts,
      deadlineMs: 10_000,
    });
    if (a.code === 'OK') ids[i] = volumeIdOf(a);
    else rec.violate(`CreateVolume ${name}: ${a.code} ${a.message}`);
  });
  const volids = ids.map((id) => `local-lvm:${id.split('/')[3]}`);
  const state = async () => (await admin.state()) as SimState;
  // Each round kills at another moment within `span` ms after `base`, inside the batch's calls.
  const killAt = (r: number, base: number, span = 200) => base + ((r * 97) % span);

  for (let r = 0; r < rounds; r++) {
    const publish = { nodeId: vm.name, volumeCapability: SINGLE_WRITER };
    await storm(
      'attach storm',
      ids,
      (volumeId) => csi.op('controller', 'ControllerPublishVolume', { ...publish, volumeId }, opts),
      killAt(r, 120),
    );
    let s = await state();
    const h = holders(s);
    const cfg = defined(
      s.vms.find((v) => v.vmid === vm.vmid),
      `VM ${vm.vmid} in the simulator's state`,
    );
    for (const volid of volids) {
      const on = [...(h.get(volid) ?? [])];
      const slots = Object.entries(cfg.config).filter(
        ([k, v]) => /^scsi\d+$/.test(k) && volidOfDrive(v) === volid,
      ).length;
      if (on.length !== 1 || on[0] !== vm.vmid || slots !== 1)
        rec.violate(
          `after the attach storm ${volid} is on VMs [${on.join(',')}] in ${slots} slot(s) of ${vm.vmid} (want exactly one)`,
        );
    }
    const detach = { ...opts, until: 'ok' as const };
    await storm(
      'detach storm',
      ids,
      (volumeId) => csi.op('controller', 'ControllerUnpublishVolume', { volumeId, nodeId: vm.name }, detach),
      // An unpublish is 2 calls at 25 ms (a read, then the synchronous config change), and a batch
      // of them is answered together: kill while the second call is out (it was 80 ms + up to 200
      // when an unpublish took 4 calls, and then cut nothing).
      killAt(r, 30, 20),
    );
    s = await state();
    for (const [volid, on] of holders(s))
      if (volids.includes(volid)) rec.violate(`after the detach storm ${volid} is still on VMs ${[...on].join(',')}`);
  }

  await lockedAttachKill(ids.slice(0, long ? 6 : 3));

  // Offline expansion goes through a short-lived helper attachment: kill while it exists.
  const grow = ids.slice(0, long ? 8 : 4);
  const target = 2 * GiB;
  const expand = { capacityRange: { requiredBytes: String(target) }, volumeCapability: SINGLE_WRITER };
  await storm(
    'offline expansion',
    grow,
    (volumeId) =>
      csi.op('controller', 'ControllerExpandVolume', { ...expand, volumeId }, { ...opts, deadlineMs: 10_000 }),
    150,
  );
  const sizes = new Map(
    (await state()).nodes.flatMap((nd) =>
      nd.storages.flatMap((st) => st.volumes.map((v) => [v.volid, v.size] as const)),
    ),
  );
  for (const id of grow) {
    const volid = `local-lvm:${id.split('/')[3]}`;
    if ((sizes.get(volid) ?? 0) < target)
      rec.violate(`after offline expansion ${volid} has ${sizes.get(volid)} bytes (want ≥ ${target})`);
  }

  /**
   * Attaches to VM A sent and waiting for A's lock (PVE's 10 s lock wait; another client holds
   * it) when the controller is killed; the restarted controller gets publishes of the same
   * volumes to VM B. B must never get OK: the dead process's change lands once the lock is free.
   */
  async function lockedAttachKill(vols: string[]): Promise<void> {
    const [a, b] = [vm, { name: 'talos-cp-1', vmid: 101 }];
    const holdMs = 5000;
    await admin.patchFaults({ lockTimeoutMs: 10_000 });
    const since = (await admin.requests()).lastSeq;
    await admin.holdLock({ vmid: a.vmid }, holdMs);
    const released = Date.now() + holdMs;
    rec.fault('lock-held');
    rec.ops += vols.length;
    const cut = vols.map((volumeId) =>
      csi.once(
        'controller',
        'ControllerPublishVolume',
        { volumeId, nodeId: a.name, volumeCapability: SINGLE_WRITER },
        { deadlineMs: 15_000 },
      ),
    );
    // Kill once a config change is in Proxmox: a qmconfig task waiting for the lock. Which
    // volumes it carries is read from the request log (the first batch may not hold them all).
    const posts = async () =>
      (await admin.requests(since)).entries.filter(
        (e) => e.route === 'POST /nodes/{node}/qemu/{vmid}/config' && e.path.includes(`/qemu/${a.vmid}/`),
      );
    for (const t0 = Date.now(); (await posts()).length === 0;) {
      if (Date.now() - t0 > holdMs - 1000) {
        rec.violate(
          `kill while an attach waits for a lock: no config change of VM ${a.vmid} was sent within ${holdMs - 1000} ms`,
        );
        break;
      }
      await sleep(50);
    }
    rec.fault('calls cut', rec.inflight);
    await prog.kill9();
    rec.fault('kill-9 (attach waiting for a VM lock)');
    const sentValues = (await posts()).flatMap((e) => Object.values(e.params ?? {}));
    const sent = (id: string) => sentValues.some((v) => volidOfDrive(v) === `local-lvm:${id.split('/')[3]}`);
    rec.fault('attaches left waiting in Proxmox by the killed process', vols.filter(sent).length);
    await Promise.all(cut);
    await prog.start();
    const elsewhere = await Promise.all(
      vols.map((volumeId) =>
        csi.op(
          'controller',
          'ControllerPublishVolume',
          { volumeId, nodeId: b.name, volumeCapability: SINGLE_WRITER },
          opts,
        ),
      ),
    );
    vols.forEach((id, i) => {
      const ans = elsewhere[i];
      if (!ans || !sent(id)) return; // never sent: free to go to B (the audit below still counts VMs)
      if (ans.code === 'OK')
        rec.violate(
          `publish of ${id} to ${b.name} after a restart answered OK while the killed process's attach to ${a.name} was still waiting for its lock`,
        );
      else if (ans.code !== 'FAILED_PRECONDITION')
        rec.violate(
          `publish of ${id} to ${b.name} after a restart ended ${ans.code} (want FAILED_PRECONDITION) ${ans.message.slice(0, 200)}`,
        );
    });
    await sleep(Math.max(0, released + 500 - Date.now()));
    const h = holders(await state());
    for (const id of vols) {
      const on = [...(h.get(`local-lvm:${id.split('/')[3]}`) ?? [])];
      if (on.length > 1) rec.violate(`${id} is on VMs ${on.join('+')} after the lock was released`);
    }
    await admin.patchFaults({ lockTimeoutMs: BASE_FAULTS.lockTimeoutMs ?? 3000 });
    for (const volumeId of vols) {
      for (const nodeId of [a.name, b.name])
        await csi.op('controller', 'ControllerUnpublishVolume', { volumeId, nodeId }, { ...opts, until: 'ok' });
    }
  }

  await storm(
    'DeleteVolume',
    ids,
    (volumeId) => csi.op('controller', 'DeleteVolume', { volumeId }, { ...opts, deadlineMs: 10_000, until: 'ok' }),
    100,
  );
  return scenario.end();
}
