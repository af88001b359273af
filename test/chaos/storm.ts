// Scenario 1, fault storm: volumes go through Create → Publish A → (Publish B refused) →
// Unpublish A → Publish B → Unpublish B → Delete while the simulator's fault profile changes
// under them every moment: 5xx, answers dropped before and after the change took effect, tasks
// failing before and after, lock contention (another writer holding VM and storage locks),
// detaches stuck in the pending section (with and without an error), and latency.
import type { Faults } from '../../sim/index.js';
import { defined } from '../../src/defined.js';
import { DoubleAttachSampler, FaultLedger, auditProxmox } from './audit.js';
import { BASE_FAULTS, HOSTS, SINGLE_WRITER, singleWriterVolume, vmPair, type ChaosEnv } from './env.js';
import { startProxmoxController } from './program.js';
import { Recorder, pool, sleep, volumeIdOf } from './rpc.js';

const TASK_FAIL = 'chaos task failure';

interface Profile {
  name: string;
  faults: Partial<Faults>;
  /** Another writer takes VM config locks and a storage lock for a while. */
  holdLocks?: boolean;
}

const PROFILES: Profile[] = [
  { name: '5xx', faults: { errorRate: 0.25, errorMessage: 'cluster not ready - no quorum?' } },
  { name: 'drop-before', faults: { dropRate: 0.25, dropPhase: 'before' } },
  {
    name: 'task-fail-before',
    faults: { taskFailRate: 0.4, taskFailPhase: 'before', taskFailMessage: `${TASK_FAIL} (before effect)` },
  },
  { name: 'stuck-detach-error', faults: { detachPending: 'error' } },
  { name: 'drop-after', faults: { dropRate: 0.25, dropPhase: 'after' } },
  { name: 'lock-contention', faults: { lockHoldMs: 300 }, holdLocks: true },
  {
    name: 'task-fail-after',
    faults: { taskFailRate: 0.4, taskFailPhase: 'after', taskFailMessage: `${TASK_FAIL} (after effect)` },
  },
  { name: 'stuck-detach-silent', faults: { detachPending: 'silent' } },
  { name: 'latency', faults: { latencyMs: 150 } },
  { name: 'calm', faults: {} },
];

export async function faultStorm(env: ChaosEnv): Promise<Recorder> {
  const rec = new Recorder('1 fault storm (Proxmox)');
  const { admin, long } = env;
  await admin.reset();
  const { prog, csi } = await startProxmoxController(env, rec, 'storm');
  const ledger = new FaultLedger(admin, env.sim.adminUrl, rec, TASK_FAIL);
  await ledger.begin();
  const sampler = new DoubleAttachSampler(admin, rec).start();

  // An object, so the loop below reads the flag the storm's end sets (TypeScript would narrow a `let`).
  const state = { storming: true };
  const periodMs = long ? 2000 : 1200;
  const switcher = (async () => {
    for (let i = 0; state.storming; i++) {
      const p = defined(PROFILES[i % PROFILES.length], 'a fault profile');
      await ledger.switchTo(p.name);
      await admin.setFaults({ ...BASE_FAULTS, ...p.faults });
      if (p.holdLocks) {
        const host = defined(HOSTS[i % HOSTS.length], 'a host');
        await Promise.all([
          ...host.vms.map((vm) => admin.holdLock({ vmid: vm.vmid }, 1500)),
          admin.holdLock({ node: host.zone, storage: 'local-lvm' }, 1000),
        ]).catch(() => undefined);
        rec.fault('lock-held', 3);
      }
      await sleep(periodMs);
    }
    await ledger.switchTo('none');
    await admin.setFaults(BASE_FAULTS);
  })();

  const n = long ? 120 : 30;
  const names = Array.from({ length: n }, (_, i) => `pvc-chaos-storm-${String(i).padStart(3, '0')}`);
  const pub = { deadlineMs: 15_000, budgetMs: 120_000 };
  const prov = { deadlineMs: 10_000, budgetMs: 120_000 };
  await pool(names, long ? 20 : 15, async (name, i) => {
    const { zone, a, b } = vmPair(i, i % 2 === 1);
    const expect = (what: string, got: { code: string; message: string }, want: string) => {
      if (got.code !== want)
        rec.violate(`${name}: ${what} answered ${got.code} (want ${want}): ${got.message.slice(0, 200)}`);
      return got.code === want;
    };
    const created = await csi.op('controller', 'CreateVolume', singleWriterVolume(name, zone), prov);
    if (!expect('CreateVolume', created, 'OK')) return;
    const volumeId = volumeIdOf(created);
    const publish = (vm: string) =>
      csi.op('controller', 'ControllerPublishVolume', { volumeId, nodeId: vm, volumeCapability: SINGLE_WRITER }, pub);
    const unpublish = (vm: string) =>
      csi.op('controller', 'ControllerUnpublishVolume', { volumeId, nodeId: vm }, { ...pub, until: 'ok' });
    if (expect(`publish to ${a.name}`, await publish(a.name), 'OK')) {
      expect(`publish to ${b.name} while on ${a.name}`, await publish(b.name), 'FAILED_PRECONDITION');
      await unpublish(a.name);
      if (expect(`publish to ${b.name}`, await publish(b.name), 'OK')) await unpublish(b.name);
    }
    // Whatever happened above, nothing may stay attached: then the volume goes.
    await csi.op('controller', 'ControllerUnpublishVolume', { volumeId }, { ...pub, until: 'ok' });
    await csi.op('controller', 'DeleteVolume', { volumeId }, { ...prov, until: 'ok' });
  });
  state.storming = false;
  await switcher;
  await sampler.stop();
  await ledger.collect();
  csi.close();
  await prog.stop();
  await auditProxmox(admin, rec);
  return rec;
}
