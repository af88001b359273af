// The audit after each scenario, from the outside: the simulator's state (admin endpoint), the
// NFS export on disk and the mount table. Everything a scenario made must be gone again, and no
// disk may ever sit on two VMs at once (a sampler watches for that while the scenario runs).
import fs from 'node:fs';
import path from 'node:path';
import type { SimulatorAdmin } from '../../sim/index.js';
import type { Recorder } from './rpc.js';

export interface SimVm {
  vmid: number;
  node: string;
  name: string;
  status: string;
  digest: string;
  config: Record<string, string>;
  pending: Record<string, string>;
  pendingDelete: string[];
}
export interface SimState {
  locks?: string[];
  nodes: { name: string; storages: { id: string; volumes: { volid: string; size: number; owner: number }[] }[] }[];
  vms: SimVm[];
}

const DRIVE_RE = /^(scsi|virtio|sata|ide)\d+$/;
const HELPER_WWN_RE = /wwn=0x5056432d5850/i;

/** `storage:disk` of a drive value, or undefined (cdrom, none…). */
export function volidOfDrive(value: string): string | undefined {
  const first = value.replace(/,.*$/s, '');
  const file = first.includes('=') ? /(?:^|,)(?:file|volume)=([^,]+)/.exec(value)?.[1] : first;
  return file && file.includes(':') && file !== 'none' ? file : undefined;
}

/** VMs that have each volume in their config or pending section (any drive key or unusedN). */
export function holders(state: SimState): Map<string, Set<number>> {
  const out = new Map<string, Set<number>>();
  for (const vm of state.vms) {
    for (const [k, v] of [...Object.entries(vm.config), ...Object.entries(vm.pending)]) {
      if (!DRIVE_RE.test(k)) continue;
      const volid = volidOfDrive(v);
      if (!volid) continue;
      const on = out.get(volid) ?? new Set<number>();
      out.set(volid, on.add(vm.vmid));
    }
  }
  return out;
}

/** Volumes on two or more VMs at once. */
export function doubles(state: SimState): string[] {
  return [...holders(state)]
    .filter(([, vms]) => vms.size > 1)
    .map(([volid, vms]) => `${volid} on VMs ${[...vms].join('+')}`);
}

/** Watches the simulator while a scenario runs; every volume seen on two VMs counts once. */
export class DoubleAttachSampler {
  private seen = new Set<string>();
  private timer?: NodeJS.Timeout;
  private busy = false;

  constructor(
    private readonly admin: SimulatorAdmin,
    private readonly rec: Recorder,
    private readonly everyMs = 100,
  ) {}

  start(): this {
    this.timer = setInterval(() => void this.sample(), this.everyMs);
    return this;
  }

  async sample(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      for (const d of doubles((await this.admin.state()) as SimState)) {
        const volid = d.replace(/ .*$/s, '');
        if (this.seen.has(volid)) continue;
        this.seen.add(volid);
        this.rec.doubleAttaches++;
        this.rec.violate(`double attach: ${d}`);
      }
    } catch {
      /* the simulator is busy; next sample */
    } finally {
      this.busy = false;
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.sample();
  }
}

/** Boot disks and VM configs as the cluster file made them: what bad input must never change. */
export function baseline(state: SimState): Map<number, string> {
  return new Map(state.vms.map((vm) => [vm.vmid, vm.digest]));
}

/**
 * Leaks in the simulator: disks of the controller VMID, slots holding them, unusedN, pending
 * changes, helper attachments (WWN PVC-XP..), VM `lock`s and held lock files, volumes on two
 * VMs; plus configs that differ from `base` when given.
 */
export async function auditProxmox(
  admin: SimulatorAdmin,
  rec: Recorder,
  opts: { controllerVmId?: number; base?: Map<number, string> } = {},
): Promise<void> {
  const owner = opts.controllerVmId ?? 9999;
  // Locks held by another writer or an answer still on its way: give them a moment to end.
  let state = (await admin.state()) as SimState;
  for (let i = 0; i < 50 && (state.locks?.length ?? 0) > 0; i++) {
    await new Promise((r) => setTimeout(r, 100));
    state = (await admin.state()) as SimState;
  }
  const leak = (kind: string, what: string) => {
    rec.leaks[kind] = (rec.leaks[kind] ?? 0) + 1;
    rec.violate(`leak (${kind}): ${what}`);
  };
  for (const n of state.nodes)
    for (const s of n.storages) for (const v of s.volumes) if (v.owner === owner) leak('disk', `${n.name}/${v.volid}`);
  for (const vm of state.vms) {
    const at = `VM ${vm.name} (${vm.vmid})`;
    for (const [k, v] of Object.entries(vm.config)) {
      if (/^unused\d+$/.test(k)) leak('unusedN', `${at} ${k}=${v}`);
      else if (DRIVE_RE.test(k) && HELPER_WWN_RE.test(v)) leak('helper', `${at} ${k}=${v}`);
      else if (DRIVE_RE.test(k) && volidOfDrive(v)?.includes(`:vm-${owner}-`)) leak('slot', `${at} ${k}=${v}`);
    }
    for (const [k, v] of Object.entries(vm.pending)) leak('pending', `${at} pending ${k}=${v}`);
    for (const k of vm.pendingDelete) leak('pending', `${at} pending delete ${k}`);
    if (vm.config.lock) leak('lock', `${at} lock=${vm.config.lock}`);
    const was = opts.base?.get(vm.vmid);
    if (was !== undefined && was !== vm.digest)
      leak('changed', `${at}: config changed (digest ${was.slice(0, 8)} → ${vm.digest.slice(0, 8)})`);
  }
  for (const l of state.locks ?? []) leak('lock', `lock file held: ${l}`);
  for (const d of doubles(state)) {
    rec.doubleAttaches++;
    rec.violate(`double attach at the end: ${d}`);
  }
}

/** Directories in the export besides `expected` (relative paths) and their parents. */
export function auditExport(exportDir: string, rec: Recorder, expected: string[], root = 'talos'): void {
  const keep = new Set<string>();
  for (const e of expected) {
    const parts = e.split('/');
    for (let i = 1; i <= parts.length; i++) keep.add(parts.slice(0, i).join('/'));
  }
  const walk = (rel: string, depth: number) => {
    for (const d of fs.readdirSync(path.join(exportDir, root, rel), { withFileTypes: true })) {
      if (!d.isDirectory()) continue;
      const r = rel ? `${rel}/${d.name}` : d.name;
      if (keep.has(r)) {
        if (depth < 1) walk(r, depth + 1);
        continue;
      }
      rec.leaks.directory = (rec.leaks.directory ?? 0) + 1;
      rec.violate(`leak (directory): ${root}/${r}`);
    }
  };
  walk('', 0);
}

/**
 * Counts the faults the simulator applied, from its request log and task list: answers it
 * refused (5xx) or dropped (before/after effect), tasks it failed, and per fault profile the
 * requests it slowed down, held up behind a lock, or left with a stuck pending detach.
 */
export class FaultLedger {
  private seq = 0;
  private profile = 'none';
  private countedTasks = new Set<string>();

  constructor(
    private readonly admin: SimulatorAdmin,
    private readonly adminUrl: string,
    private readonly rec: Recorder,
    private readonly taskFailMessage: string,
  ) {}

  async begin(): Promise<void> {
    this.seq = (await this.admin.requests(Number.MAX_SAFE_INTEGER)).lastSeq;
  }

  /** Reads what happened under the previous profile, then switches to `next`. */
  async switchTo(next: string): Promise<void> {
    await this.collect();
    this.profile = next;
  }

  async collect(): Promise<void> {
    const { entries, lastSeq } = await this.admin.requests(this.seq);
    this.seq = lastSeq;
    for (const e of entries) {
      if (e.fault) this.rec.fault(e.fault);
      if (this.profile === 'latency') this.rec.fault('latency');
      else if (this.profile === 'lock-contention' && e.method !== 'GET') this.rec.fault('lock-contention');
      else if (this.profile.startsWith('stuck-detach') && /\/unlink$|\/config$/.test(e.route) && e.method !== 'GET')
        this.rec.fault(this.profile);
    }
    const tasks = (await (await fetch(`${this.adminUrl}/tasks`)).json()) as { upid: string; exitstatus?: string }[];
    for (const t of tasks) {
      if (t.exitstatus === undefined || this.countedTasks.has(t.upid)) continue;
      this.countedTasks.add(t.upid);
      const m = new RegExp(`${this.taskFailMessage} \\((\\w+)`).exec(t.exitstatus);
      if (m) this.rec.fault(`task-fail-${m[1]}`);
    }
  }
}
