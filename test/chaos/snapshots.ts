// Scenario 6, snapshots under kill -9 (Proxmox): the controller is killed with SIGKILL in the
// middle of CreateSnapshot, of restores (CreateVolume from a snapshot, on the source's host and
// into another zone, where the volume VM migrates offline with its clone) and of DeleteSnapshot /
// DeleteVolume of restored volumes, started again, and every request replayed until it has its
// answer. The replay must converge: the same snapshot and volume handles as the first OK answers
// (a retry finds what the killed attempt left), and after the deletes no helper VM, snapshot
// section, volume snapshot or disk of the driver is left, and the workers' configs are those
// of the start. Its own simulator: the default one's token has the CSI role only, and a
// snapshot needs VM.Allocate, VM.Snapshot and VM.Clone, a restore into another zone VM.Migrate
// (docs/snapshots.md, "Privileges").
import fs from 'node:fs';
import path from 'node:path';
import { SimulatorAdmin, startSimulator } from '../../sim/index.js';
import { writeProxmoxConfig } from '../harness/backends.js';
import { snapshotSimConfig } from '../helpers/snapshot-sim-config.js';
import { type SimState, auditProxmox } from './audit.js';
import { BASE_FAULTS, type ChaosEnv, singleWriterVolume } from './env.js';
import { startProxmoxController } from './program.js';
import { type Answer, Recorder, field, pool, sleep, strikeAt, volumeIdOf } from './rpc.js';

export async function snapshotScenario(env: ChaosEnv): Promise<Recorder> {
  const rec = new Recorder('6 kill -9 in snapshots + restores');
  const config = snapshotSimConfig();
  const runDir = path.join(env.runDir, 'snapshots');
  fs.mkdirSync(runDir, { recursive: true });
  // Slow enough that a kill lands between the helper VMs' steps (each a call and a task).
  const sim = await startSimulator({
    backend: 'none',
    config,
    stateDir: path.join(runDir, 'sim'),
    faults: { ...BASE_FAULTS, latencyMs: 10 },
  });
  const admin = new SimulatorAdmin(sim.adminUrl);
  const proxmoxConfig = path.join(runDir, 'proxmox-config.yaml');
  writeProxmoxConfig(proxmoxConfig, sim, 'homelab');
  const { prog, csi } = await startProxmoxController({ ...env, runDir, sim, admin, proxmoxConfig }, rec, 'snap');
  const state = async () => (await admin.state()) as SimState;
  const base = new Map((await state()).vms.map((v) => [v.vmid, v.digest]));
  const n = env.long ? 8 : 2;
  const opts = { deadlineMs: 15_000, budgetMs: 90_000, backoffStartMs: 100, backoffMaxMs: 1000 };
  try {
    /** The batch, a kill -9 within it, a restart, the replay; the handles of the OK answers, checked equal. */
    const storm = async (
      what: string,
      calls: Array<() => Promise<Answer>>,
      killMs: number,
      id: (a: Answer) => string,
    ): Promise<string[]> => {
      const batch = Promise.all(calls.map((c) => c()));
      const killer = (async () => {
        await strikeAt(rec, killMs, calls.length);
        const cut = rec.inflight;
        await prog.kill9();
        rec.fault('kill-9');
        rec.fault('calls cut', cut);
        if (cut === 0) rec.violate(`${what}: the kill (planned at ${killMs} ms) cut no call`);
        await sleep(100);
        await prog.start();
      })();
      const first = await batch;
      await killer;
      const replay = await Promise.all(calls.map((c) => c()));
      return replay.map((a, i) => {
        if (a.code !== 'OK') rec.violate(`${what} #${i}: final answer ${a.code} ${a.message.slice(0, 200)}`);
        const was = first[i];
        if (was?.code === 'OK' && a.code === 'OK' && id(was) !== id(a))
          rec.violate(`${what} #${i}: the retry answered ${id(a)}, the first answer was ${id(was)}`);
        return a.code === 'OK' ? id(a) : '';
      });
    };
    const names = Array.from({ length: n }, (_, i) => `pvc-chaos-snap-${i}`);
    const sources: string[] = [];
    await pool(names, 4, async (name, i) => {
      const a = await csi.op('controller', 'CreateVolume', singleWriterVolume(name, 'hyper1'), opts);
      if (a.code === 'OK') sources[i] = volumeIdOf(a);
      else rec.violate(`CreateVolume ${name}: ${a.code} ${a.message}`);
    });
    const snapId = (a: Answer) => {
      const id = field(a.res, 'snapshot', 'snapshotId');
      return typeof id === 'string' ? id : '';
    };
    // A snapshot is create, hold, snapshot, clone, unsnapshot, destroy: kill within it.
    const snaps = await storm(
      'CreateSnapshot',
      sources.map(
        (sourceVolumeId, i) => () =>
          csi.op('controller', 'CreateSnapshot', { name: `snapshot-chaos-${i}`, sourceVolumeId }, opts),
      ),
      250,
      snapId,
    );
    const restored = await storm(
      'restore',
      snaps.map(
        (snapshotId, i) => () =>
          csi.op(
            'controller',
            'CreateVolume',
            {
              // Every other one into another zone: its volume VM migrates offline with the clone.
              ...singleWriterVolume(`pvc-chaos-restored-${i}`, i % 2 ? 'hyper2' : 'hyper1'),
              volumeContentSource: { snapshot: { snapshotId } },
            },
            opts,
          ),
      ),
      300,
      volumeIdOf,
    );
    const until = { ...opts, until: 'ok' as const };
    await storm(
      'DeleteSnapshot + DeleteVolume',
      [
        ...snaps.map((snapshotId) => () => csi.op('controller', 'DeleteSnapshot', { snapshotId }, until)),
        ...[...restored, ...sources].map((volumeId) => () => csi.op('controller', 'DeleteVolume', { volumeId }, until)),
      ],
      60,
      () => '',
    );
    // Deleting what is gone answers OK at once, with no retry (a restored volume's free used to
    // leave the disk in the content cache: FAILED_PRECONDITION "owner VM does not exist").
    for (const volumeId of restored) {
      const a = await csi.once('controller', 'DeleteVolume', { volumeId }, { deadlineMs: 10_000 });
      if (a.code !== 'OK') rec.violate(`DeleteVolume ${volumeId} again: ${a.code} ${a.message.slice(0, 200)}`);
    }
    // Nothing left of the copies: helper VMs, their snapshot sections, volume snapshots.
    const s = await state();
    for (const vm of s.vms as Array<SimState['vms'][number] & { snapshots?: Record<string, unknown> }>) {
      const sections = Object.keys(vm.snapshots ?? {});
      if ((vm.name as string | null)?.startsWith('pve-nfs-csi-'))
        rec.violate(`leak (helper VM): ${vm.name} (${vm.vmid}) is left`);
      else if (sections.length) rec.violate(`VM ${vm.name} (${vm.vmid}) has snapshot sections ${sections.join(', ')}`);
    }
    for (const nd of s.nodes)
      for (const st of nd.storages)
        for (const v of st.volumes as Array<{ volid: string; owner: number; snapshots?: unknown[] }>) {
          if (v.snapshots?.length) rec.violate(`leak (volume snapshot): ${nd.name}/${v.volid}`);
          if (v.owner >= 800_000_000 && v.owner < 900_000_000) rec.violate(`leak (helper disk): ${nd.name}/${v.volid}`);
        }
  } finally {
    csi.close();
    await prog.stop();
    await auditProxmox(admin, rec, { base });
    await sim.close();
  }
  return rec;
}
