// The Proxmox controller backend against the project's Proxmox VE simulator over HTTPS (CA
// pinned, API token): the set-up every integration test of src/proxmox/controller shares. Both
// the simulator and each controller are closed on the test's teardown.
import pino from 'pino';
import type { ProxmoxClusterConfig } from '../../src/config/types.js';
import {
  createProxmoxController,
  type ProxmoxController,
  type ProxmoxControllerOptions,
} from '../../src/proxmox/controller/controller.js';
import { SimulatorAdmin, startSimulator, type RunningSimulator, type StartOptions } from '../../sim/index.js';
import { CONTROLLER_METHODS, implemented } from './implemented.js';
import { simState, type SimState } from './sim-state.js';
import type { Teardown } from './teardown.js';

/** The controller's VM ID: upstream's default, so disks are `vm-9999-<pv>`. */
export const CONTROLLER_VMID = 9999;
/** The default cluster's region (sim/default-cluster.yaml). */
export const REGION = 'homelab';

/**
 * Simulator timings for tests: no delay on a failed login, 5 ms tasks, a 1 s config lock wait
 * (Proxmox waits 10 s; tests about lock waits set `lockTimeoutMs: 10_000` themselves).
 */
export const TEST_FAULTS = { authFailureDelayMs: 0, taskDurationMs: 5, lockTimeoutMs: 1000 } as const;

export interface SimOptions extends Omit<StartOptions, 'faults'> {
  /** Merged over TEST_FAULTS. */
  faults?: StartOptions['faults'];
}

export interface SimCluster {
  sim: RunningSimulator;
  admin: SimulatorAdmin;
  /** The driver's cluster entry for this simulator: its URL, CA file and token. */
  cluster: ProxmoxClusterConfig;
  state: () => Promise<SimState>;
}

/** Starts a simulator (backend `none` unless told) and describes it as the driver's cluster entry. */
export async function startSimCluster(t: Teardown, opts: SimOptions = {}): Promise<SimCluster> {
  const sim = await startSimulator({ backend: 'none', ...opts, faults: { ...TEST_FAULTS, ...opts.faults } });
  t.teardown(() => sim.close());
  const admin = new SimulatorAdmin(sim.adminUrl);
  return { sim, admin, cluster: clusterOf(sim), state: () => simState(admin) };
}

/** The driver's cluster entry for a running simulator: its URL, its CA pinned, its token. */
export const clusterOf = (sim: RunningSimulator): ProxmoxClusterConfig => ({
  url: sim.url,
  insecure: false,
  caFile: sim.caFile,
  tokenId: sim.tokenId,
  tokenSecret: sim.tokenSecret,
  region: REGION,
});

/** The Proxmox controller with every optional CSI method checked present (it implements them all). */
export type FullProxmoxController = ProxmoxController &
  Required<Pick<ProxmoxController, (typeof CONTROLLER_METHODS)[number]>>;

export interface ControllerOptions extends Partial<Omit<ProxmoxControllerOptions, 'config' | 'log'>> {
  /** Extra keys of the cluster entry (`expansionHelpers`…). */
  cluster?: Partial<ProxmoxClusterConfig>;
}

/**
 * A controller (one driver process) on the cluster. Defaults: 10 s per HTTP exchange and a 1.5 s
 * confirmation wait (the simulator's tasks take milliseconds); `tuning` is merged over that.
 */
export function proxmoxController(
  t: Teardown,
  cluster: ProxmoxClusterConfig,
  opts: ControllerOptions = {},
): FullProxmoxController {
  const { cluster: extra, tuning, ...rest } = opts;
  const c: ProxmoxController = createProxmoxController({
    config: { clusters: [{ ...cluster, ...extra }], controllerVmId: CONTROLLER_VMID },
    log: pino({ level: 'silent' }),
    queryTimeoutMs: 10_000,
    ...rest,
    tuning: { queue: { confirmTimeoutMs: 1500 }, ...tuning },
  });
  t.teardown(() => c.close());
  return implemented(c, CONTROLLER_METHODS);
}

export interface ProxmoxOnSim extends SimCluster {
  c: FullProxmoxController;
}

/** A simulator and one controller on it. */
export async function startProxmoxOnSim(
  t: Teardown,
  opts: { sim?: SimOptions; controller?: ControllerOptions } = {},
): Promise<ProxmoxOnSim> {
  const s = await startSimCluster(t, opts.sim);
  return { ...s, c: proxmoxController(t, s.cluster, opts.controller) };
}
