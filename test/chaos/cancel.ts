// Scenario 3, cancellation: another writer holds VM A's config lock; a caller publishing a volume
// to A gives up (a short deadline, or it cancels the call) while the driver's config change
// waits for that lock. The volume is then published to VM B, as the attacher does when the pod
// moved. A single-writer volume must never end up on both VMs: while A's change may still land,
// B must get a retryable answer, and a final FAILED_PRECONDITION once it did land. Finally the
// first caller replays its request and gets OK, and everything is cleaned up.
import { holders, type SimState } from './audit.js';
import { SINGLE_WRITER, singleWriterVolume, vmPair, type ChaosEnv } from './env.js';
import { type Recorder, sleep, volumeIdOf } from './rpc.js';
import { startProxmoxScenario } from './scenario.js';

export async function cancelScenario(env: ChaosEnv): Promise<Recorder> {
  const { admin, long } = env;
  // PVE's own lock wait (10 s): the change held up behind the lock lands once it is released.
  const scenario = await startProxmoxScenario(
    env,
    '3 cancelled callers + publish elsewhere',
    'cancel',
    { lockTimeoutMs: 10_000 },
    50,
  );
  const { rec, csi } = scenario;
  const holdMs = 4000;
  const opts = { deadlineMs: 15_000, budgetMs: 60_000 };

  const round = async (r: number, hostIdx: number, how: 'deadline' | 'cancel') => {
    const { zone, a, b } = vmPair(hostIdx, r % 2 === 1);
    const name = `pvc-chaos-cancel-${r}-${zone}`;
    const created = await csi.op('controller', 'CreateVolume', singleWriterVolume(name, zone), {
      ...opts,
      deadlineMs: 10_000,
    });
    if (created.code !== 'OK') {
      rec.violate(`CreateVolume ${name}: ${created.code} ${created.message}`);
      return;
    }
    const volumeId = volumeIdOf(created);
    const volid = `local-lvm:${volumeId.split('/')[3]}`;
    const publish = { volumeId, volumeCapability: SINGLE_WRITER };

    await admin.holdLock({ vmid: a.vmid }, holdMs);
    rec.fault('lock-held');
    rec.ops++;
    const gaveUp = await csi.once(
      'controller',
      'ControllerPublishVolume',
      { ...publish, nodeId: a.name },
      how === 'deadline' ? { deadlineMs: 1500, expectDeadline: true } : { cancelAfterMs: 1000 },
    );
    rec.fault(how === 'deadline' ? 'caller deadline 1.5 s' : 'caller cancel');
    if (gaveUp.code === 'OK')
      rec.violate(`${name}: publish to ${a.name} answered OK although its VM config was locked`);
    const toB = await csi.op('controller', 'ControllerPublishVolume', { ...publish, nodeId: b.name }, opts);
    if (toB.code === 'OK')
      rec.violate(
        `${name}: publish to ${b.name} answered OK while the cancelled publish to ${a.name} could still land (docs/design.md#fenced-changes)`,
      );
    else if (toB.code !== 'FAILED_PRECONDITION')
      rec.violate(
        `${name}: publish to ${b.name} ended ${toB.code} (want FAILED_PRECONDITION) ${toB.message.slice(0, 200)}`,
      );

    // Let the held-up change land (or fail), then look: at most one VM may have the disk.
    await sleep(holdMs + 500);
    const on = holders((await admin.state()) as SimState).get(volid) ?? new Set();
    if (on.size > 1) rec.violate(`${name}: ${volid} is on VMs ${[...on].join('+')} after the lock was released`);

    // The first caller's sidecar replays; the volume then leaves as usual.
    if (toB.code !== 'OK') {
      const replay = await csi.op('controller', 'ControllerPublishVolume', { ...publish, nodeId: a.name }, opts);
      if (replay.code !== 'OK')
        rec.violate(`${name}: replayed publish to ${a.name} ended ${replay.code} ${replay.message.slice(0, 200)}`);
    }
    await csi.op('controller', 'ControllerUnpublishVolume', { volumeId }, { ...opts, until: 'ok' });
    await csi.op('controller', 'DeleteVolume', { volumeId }, { ...opts, deadlineMs: 10_000, until: 'ok' });
  };

  for (let r = 0; r < (long ? 3 : 1); r++) {
    await Promise.all([round(r, 0, 'deadline'), round(r, 1, 'cancel'), round(r + 1, 2, 'deadline')]);
  }
  return scenario.end();
}
