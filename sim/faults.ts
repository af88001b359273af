// Fault injection knobs. Set in the cluster file under `faults:` or changed at run time through the
// admin endpoint (PUT replaces, PATCH merges). Random faults use a seeded PRNG so runs repeat.

export type DetachPendingMode = 'off' | 'error' | 'silent';
export type MigrateFailMode = 'off' | 'copy' | 'cleanup';

export interface Faults {
  /**
   * Every authenticated API request runs its handler no sooner than this long after it arrived
   * (the simulator's own parsing is inside it); task and lock waits add to it.
   */
  latencyMs: number;
  /** Extra latency per route key, e.g. `"PUT /nodes/{node}/qemu/{vmid}/config": 500`. */
  latencyByRoute: Record<string, number>;
  /** Probability (0..1) that a request is answered with HTTP 500 `errorMessage` before it runs. */
  errorRate: number;
  /** Route keys the error rate applies to; empty = all routes. */
  errorRoutes: string[];
  errorMessage: string;
  /** Probability (0..1) that the connection is destroyed without an answer. */
  dropRate: number;
  /** `before`: the request does nothing; `after`: it takes effect, only the answer is lost. */
  dropPhase: 'before' | 'after';
  dropRoutes: string[];
  /** Probability (0..1) that a task (UPID) ends with `taskFailMessage` as exitstatus. */
  taskFailRate: number;
  /** `before`: the task changes nothing; `after`: it takes effect but still reports the error. */
  taskFailPhase: 'before' | 'after';
  taskFailMessage: string;
  /** Minimum time a task stays `running`. */
  taskDurationMs: number;
  /** Extra time every config/storage lock holder keeps the lock (contention). */
  lockHoldMs: number;
  /** How long a writer waits for a lock before `can't lock file … - got timeout` (PVE: 10 s). */
  lockTimeoutMs: number;
  /**
   * Unplugging a disk from a running VM: `error` fails like a guest that holds the device
   * (400 / task error `hotplug problem - …`), `silent` leaves it pending without error, which
   * Proxmox does only when the VM's `hotplug` option lacks `disk`: so while it applies, the VM's
   * `hotplug` option says so (ops/detach-fault.ts). Either way the delete stays pending.
   */
  detachPending: DetachPendingMode;
  /** VMIDs the detach fault applies to; empty = all. */
  detachPendingVmids: number[];
  /**
   * Offline migration (`POST …/migrate`): `copy` breaks the disk transfer halfway (the partial copy
   * on the target is freed, the VM and its disks stay on the source, exitstatus `migration
   * aborted`); `cleanup` fails freeing the source copy after the VM moved (the disk then exists on
   * both hosts, exitstatus `migration problems`).
   */
  migrateFail: MigrateFailMode;
  /** After a migration, /cluster/resources lists the VM on its old node for this long (pmxcfs lag). */
  resourcesLagMs: number;
  /**
   * A VM created (or cloned) while this is above 0 is listed in /cluster/resources without the
   * fields pvestatd's status data gives (name, template, usage; status `unknown`) for this many
   * reads of the VM list: Proxmox fills them only at pvestatd's next pass, up to 10 s later.
   */
  statusPassReads: number;
  /** pveproxy delays every 401 by 3 s; tests usually set 0. */
  authFailureDelayMs: number;
  /** PRNG seed for the rate-based faults. */
  seed: number;
}

export const DEFAULT_FAULTS: Faults = {
  latencyMs: 0,
  latencyByRoute: {},
  errorRate: 0,
  errorRoutes: [],
  errorMessage: 'cluster not ready - no quorum?',
  dropRate: 0,
  dropPhase: 'after',
  dropRoutes: [],
  taskFailRate: 0,
  taskFailPhase: 'before',
  taskFailMessage: 'simulated task failure (fault injection)',
  taskDurationMs: 50,
  lockHoldMs: 0,
  lockTimeoutMs: 10_000,
  detachPending: 'off',
  detachPendingVmids: [],
  migrateFail: 'off',
  resourcesLagMs: 0,
  statusPassReads: 0,
  authFailureDelayMs: 3000,
  seed: 1,
};

type Obj = Record<string, unknown>;

function num(v: unknown, where: string, min: number, max = Number.POSITIVE_INFINITY): number {
  if (typeof v !== 'number' || Number.isNaN(v) || v < min || v > max) {
    throw new Error(`${where}: expected a number in ${min}..${max === Number.POSITIVE_INFINITY ? '∞' : max}`);
  }
  return v;
}
function strList(v: unknown, where: string): string[] {
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string'))
    throw new Error(`${where}: expected a list of route keys`);
  return v as string[];
}
function oneOf<T extends string>(v: unknown, where: string, allowed: readonly T[]): T {
  if (typeof v !== 'string' || !allowed.includes(v as T)) throw new Error(`${where}: one of ${allowed.join(', ')}`);
  return v as T;
}

const MODES = {
  phase: ['before', 'after'],
  detachPending: ['off', 'error', 'silent'],
  migrateFail: ['off', 'copy', 'cleanup'],
} as const;

/** How each knob's value is checked (`w` names it in the error). */
const KNOBS: { [K in keyof Faults]: (v: unknown, w: string) => Faults[K] } = {
  latencyMs: (v, w) => num(v, w, 0),
  latencyByRoute: (v, w) => {
    if (typeof v !== 'object' || v === null) throw new Error(`${w}: expected a mapping of route key to ms`);
    return Object.fromEntries(Object.entries(v as Obj).map(([r, ms]) => [r, num(ms, `${w}.${r}`, 0)]));
  },
  errorRate: (v, w) => num(v, w, 0, 1),
  errorRoutes: strList,
  errorMessage: (v) => String(v),
  dropRate: (v, w) => num(v, w, 0, 1),
  dropPhase: (v, w) => oneOf(v, w, MODES.phase),
  dropRoutes: strList,
  taskFailRate: (v, w) => num(v, w, 0, 1),
  taskFailPhase: (v, w) => oneOf(v, w, MODES.phase),
  taskFailMessage: (v) => String(v),
  taskDurationMs: (v, w) => num(v, w, 0),
  lockHoldMs: (v, w) => num(v, w, 0),
  lockTimeoutMs: (v, w) => num(v, w, 0),
  detachPending: (v, w) => oneOf(v, w, MODES.detachPending),
  detachPendingVmids: (v, w) => {
    if (!Array.isArray(v) || v.some((x) => !Number.isInteger(x))) throw new Error(`${w}: expected a list of VMIDs`);
    return v as number[];
  },
  resourcesLagMs: (v, w) => num(v, w, 0),
  statusPassReads: (v, w) => num(v, w, 0),
  migrateFail: (v, w) => oneOf(v, w, MODES.migrateFail),
  authFailureDelayMs: (v, w) => num(v, w, 0),
  seed: (v, w) => num(v, w, 0),
};

const isKnob = (k: string): k is keyof Faults => Object.hasOwn(KNOBS, k);

/** Validates a (partial) fault object and merges it onto `base`. Unknown keys are refused. */
export function parseFaults(raw: unknown, where: string, base: Faults = DEFAULT_FAULTS): Faults {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new Error(`${where}: expected a mapping`);
  const out: Faults = { ...base, latencyByRoute: { ...base.latencyByRoute } };
  for (const [k, v] of Object.entries(raw as Obj)) {
    if (!isKnob(k))
      throw new Error(`${where}.${k}: unknown fault knob (known: ${Object.keys(DEFAULT_FAULTS).join(', ')})`);
    // KNOBS[k] returns the type of Faults[k]; TypeScript cannot follow that through a variable key.
    (out as Record<keyof Faults, unknown>)[k] = KNOBS[k](v, `${where}.${k}`);
  }
  return out;
}

/** Mulberry32: small, seedable, good enough to decide faults reproducibly. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class FaultState {
  private current: Faults;
  private rand: () => number;

  constructor(initial: Faults) {
    this.current = initial;
    this.rand = mulberry32(initial.seed);
  }

  get(): Faults {
    return this.current;
  }

  set(next: Faults): void {
    if (next.seed !== this.current.seed) this.rand = mulberry32(next.seed);
    this.current = next;
  }

  private roll(rate: number): boolean {
    return rate > 0 && (rate >= 1 || this.rand() < rate);
  }

  private applies(routes: string[], route: string): boolean {
    return routes.length === 0 || routes.includes(route);
  }

  latencyFor(route: string): number {
    return this.current.latencyMs + (this.current.latencyByRoute[route] ?? 0);
  }

  shouldError(route: string): boolean {
    return this.applies(this.current.errorRoutes, route) && this.roll(this.current.errorRate);
  }

  shouldDrop(route: string): false | 'before' | 'after' {
    if (!this.applies(this.current.dropRoutes, route) || !this.roll(this.current.dropRate)) return false;
    return this.current.dropPhase;
  }

  shouldFailTask(): false | 'before' | 'after' {
    return this.roll(this.current.taskFailRate) ? this.current.taskFailPhase : false;
  }

  detachMode(vmid: number): DetachPendingMode {
    const f = this.current;
    if (f.detachPending === 'off') return 'off';
    return f.detachPendingVmids.length === 0 || f.detachPendingVmids.includes(vmid) ? f.detachPending : 'off';
  }
}
