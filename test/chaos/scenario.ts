// The frame of a Proxmox chaos scenario: a reset simulator with the scenario's faults, the
// controller, and the double-attach sampler watching from the first call; at the end they stop,
// the base faults come back and the simulator's state is audited.
import type { Faults } from '../../sim/index.js';
import { DoubleAttachSampler, auditProxmox } from './audit.js';
import { BASE_FAULTS, type ChaosEnv } from './env.js';
import { startProxmoxController, type Program } from './program.js';
import { Recorder, type CsiCaller } from './rpc.js';

export interface ProxmoxScenario {
  rec: Recorder;
  prog: Program;
  csi: CsiCaller;
  /** Stops the sampler, the caller and the controller, restores BASE_FAULTS and audits. */
  end(): Promise<Recorder>;
}

export async function startProxmoxScenario(
  env: ChaosEnv,
  title: string,
  name: string,
  faults: Partial<Faults>,
  sampleEveryMs?: number,
): Promise<ProxmoxScenario> {
  const rec = new Recorder(title);
  const { admin } = env;
  await admin.reset();
  await admin.setFaults({ ...BASE_FAULTS, ...faults });
  const { prog, csi } = await startProxmoxController(env, rec, name);
  const sampler = new DoubleAttachSampler(admin, rec, sampleEveryMs).start();
  return {
    rec,
    prog,
    csi,
    async end() {
      await sampler.stop();
      csi.close();
      await prog.stop();
      await admin.setFaults(BASE_FAULTS);
      await auditProxmox(admin, rec);
      return rec;
    },
  };
}
