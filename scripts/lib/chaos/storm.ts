// Scenario 1, fault storm: volumes go through Create → Publish A → (Publish B refused) →
// Unpublish A → Publish B → Unpublish B → Delete while the simulator's fault profile changes
// under them every moment: 5xx, answers dropped before and after the change took effect, tasks
// failing before and after, lock contention (another writer holding VM and storage locks),
// detaches stuck in the pending section (with and without an error), and latency.
import path from 'node:path';
import type { Faults } from '../../../sim/index.js';
import { DoubleAttachSampler, FaultLedger, auditProxmox } from './audit.js';
import { BASE_FAULTS, GiB, HOSTS, SINGLE_WRITER, topology, type ChaosEnv } from './env.js';
import { Program } from './program.js';
import { CsiCaller, Recorder, pool, sleep } from './rpc.js';

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
  const sock = path.join(env.runDir, 'storm.sock');
  const prog = new Program({
    name: 'storm-controller',
    runDir: env.runDir,
    args: ['--mode', 'controller', '--proxmox-endpoint', `unix://${sock}`, '--proxmox-config', env.proxmoxConfig],
  });
  await prog.start();
  const csi = new CsiCaller(`unix://${sock}`, rec);
  const ledger = new FaultLedger(admin, env.sim.adminUrl, rec, TASK_FAIL);
  await ledger.begin();
  const sampler = new DoubleAttachSampler(admin, rec).start();

  let storming = true;
  const periodMs = long ? 2000 : 1200;
  const switcher = (async () => {
    for (let i = 0; storming; i++) {
      const p = PROFILES[i % PROFILES.length]!;
      await ledger.switchTo(p.name);
      await admin.setFaults({ ...BASE_FAULTS, ...p.faults });
      if (p.holdLocks) {
        const host = HOSTS[i % HOSTS.length]!;
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
    const host = HOSTS[i % HOSTS.length]!;
    const [a, b] = i % 2 ? [host.vms[1]!, host.vms[0]!] : [host.vms[0]!, host.vms[1]!];
    const expect = (what: string, got: { code: string; message: string }, want: string) => {
      if (got.code !== want)
        rec.violate(`${name}: ${what} answered ${got.code} (want ${want}): ${got.message.slice(0, 200)}`);
      return got.code === want;
    };
    const created = await csi.op(
      'controller',
      'CreateVolume',
      {
        name,
        parameters: { storage: 'local-lvm' },
        volumeCapabilities: [SINGLE_WRITER],
        capacityRange: { requiredBytes: String(GiB) },
        accessibilityRequirements: topology(host.zone),
      },
      prov,
    );
    if (!expect('CreateVolume', created, 'OK')) return;
    const volumeId = created.res.volume.volumeId as string;
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
  storming = false;
  await switcher;
  await sampler.stop();
  await ledger.collect();
  csi.close();
  await prog.stop();
  await auditProxmox(admin, rec);
  return rec;
}
