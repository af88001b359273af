// What every scenario gets: the run directory, the size of the run, the Proxmox simulator (one
// per suite run, reset between scenarios) and the config file pointing the program at it.
import path from 'node:path';
import { SimulatorAdmin, startSimulator, type Faults, type RunningSimulator } from '../../sim/index.js';
import { defined } from '../../src/defined.js';
import { writeProxmoxConfig } from '../harness/backends.js';

export interface ChaosEnv {
  runDir: string;
  long: boolean;
  sim: RunningSimulator;
  admin: SimulatorAdmin;
  proxmoxConfig: string;
}

/** Fault knobs every scenario starts from: no 3 s delay on auth failures; PVE's 10 s lock wait
 *  shortened to 3 s so a contended call still answers inside the sidecars' deadlines. */
export const BASE_FAULTS: Partial<Faults> = { authFailureDelayMs: 0, lockTimeoutMs: 3000, taskDurationMs: 20, seed: 7 };

export const SINGLE_WRITER = { accessMode: { mode: 'SINGLE_NODE_WRITER' }, mount: { fsType: 'ext4' } };
export const GiB = 1024 ** 3;

export interface HostVm {
  name: string;
  vmid: number;
}

/** Hosts of the default cluster and their two VMs each (talos-cp-N, talos-worker-N). */
export const HOSTS: { zone: string; vms: [HostVm, HostVm] }[] = [
  {
    zone: 'hyper1',
    vms: [
      { name: 'talos-cp-1', vmid: 101 },
      { name: 'talos-worker-1', vmid: 111 },
    ],
  },
  {
    zone: 'hyper2',
    vms: [
      { name: 'talos-cp-2', vmid: 102 },
      { name: 'talos-worker-2', vmid: 112 },
    ],
  },
  {
    zone: 'hyper3',
    vms: [
      { name: 'talos-cp-3', vmid: 103 },
      { name: 'talos-worker-3', vmid: 113 },
    ],
  },
];

export const topology = (zone: string) => ({
  requisite: [{ segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': zone } }],
});

export async function startEnv(runDir: string, long: boolean): Promise<ChaosEnv> {
  const sim = await startSimulator({ backend: 'none', stateDir: path.join(runDir, 'sim'), faults: BASE_FAULTS });
  const proxmoxConfig = path.join(runDir, 'proxmox-config.yaml');
  writeProxmoxConfig(proxmoxConfig, sim, 'homelab');
  return { runDir, long, sim, admin: new SimulatorAdmin(sim.adminUrl), proxmoxConfig };
}

/**
 * The two VMs of host `hostIdx` (modulo the hosts): `a` gets the volume, `b` is the VM a moved
 * pod asks for next; `swap` turns the pair round.
 */
export function vmPair(hostIdx: number, swap: boolean): { zone: string; a: HostVm; b: HostVm } {
  const host = defined(HOSTS[hostIdx % HOSTS.length], `host ${hostIdx}`);
  const [first, second] = host.vms;
  return swap ? { zone: host.zone, a: second, b: first } : { zone: host.zone, a: first, b: second };
}

/** A CreateVolume request for a 1 GiB single-writer local-lvm volume on `zone`. */
export const singleWriterVolume = (name: string, zone: string) => ({
  name,
  parameters: { storage: 'local-lvm' },
  volumeCapabilities: [SINGLE_WRITER],
  capacityRange: { requiredBytes: String(GiB) },
  accessibilityRequirements: topology(zone),
});
