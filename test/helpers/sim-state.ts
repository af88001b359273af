// The Proxmox VE simulator's admin `GET /state` answer (stateDump in sim/simulator.ts), typed for
// tests, and the questions tests ask of it.
import type { SimulatorAdmin } from '../../sim/index.js';

export interface SimVm {
  vmid: number;
  node: string;
  name: string | null;
  status: 'running' | 'stopped';
  digest: string;
  config: Record<string, string>;
  pending: Record<string, string>;
  /** Keys deleted while the VM runs; `!key` for a forced delete. */
  pendingDelete: string[];
  /** Snapshot sections: name → keys. */
  snapshots: Record<string, Record<string, string>>;
  /** Loop backend only: drive key → loop device. */
  loopDevices?: Record<string, string>;
}

export interface SimVolume {
  volid: string;
  size: number;
  owner: number;
  file: string | null;
}

export interface SimState {
  cluster: string;
  backend: string;
  locks: string[];
  nodes: Array<{ name: string; storages: Array<{ id: string; type: string; total: number; volumes: SimVolume[] }> }>;
  vms: SimVm[];
}

export async function simState(admin: SimulatorAdmin): Promise<SimState> {
  return (await admin.state()) as SimState;
}

/** The VM with that name; fails the caller when there is none. */
export function vmNamed(state: SimState, name: string): SimVm {
  const vm = state.vms.find((v) => v.name === name);
  if (!vm) throw new Error(`the simulator has no VM named ${name}`);
  return vm;
}

/** Names of the VMs whose config or pending section references the disk. */
export function holdersOf(state: SimState, disk: string): string[] {
  return state.vms
    .filter((v) => [...Object.values(v.config), ...Object.values(v.pending)].some((x) => x.includes(disk)))
    .map((v) => v.name ?? String(v.vmid));
}

/** The volumes of one storage of one node (`local-lvm` on `hyper1`…); fails the caller when there is none. */
export function volumesOn(state: SimState, node: string, storage: string): SimVolume[] {
  const s = state.nodes.find((n) => n.name === node)?.storages.find((x) => x.id === storage);
  if (!s) throw new Error(`the simulator has no storage ${storage} on ${node}`);
  return s.volumes;
}
