// Fences: which volumes have a Proxmox mutation that may still land. A change sent to Proxmox
// can take effect after its caller gave up (a POST …/config task waits up to 10 s for the VM
// lock, a PUT waits in pvedaemon, a lost answer says nothing), and until it has landed or is
// proven not to have landed, nothing else may act on the volume as if it had not been sent:
// that is how a cancelled publish ended up attached next to a second one (docs/design.md#fenced-changes).
// A fence is held by the work itself, never by the caller: a caller that gives up gets its
// answer at once, the work runs to its outcome in the background and then lifts the fence.
import { Busy, DeadlineExceeded } from '../../../errors.js';
import { outcomeUncertain } from '../../api/errors.js';
import type { VmRef } from '../state/vm-locator.js';

export type FenceKind = 'attach' | 'detach' | 'helper-attach' | 'resize' | 'free' | 'modify';

export interface Fence {
  kind: FenceKind;
  /** The VM whose config the change touches (none for a storage free). */
  vm?: VmRef | undefined;
  since: number;
}

/**
 * Proxmox's VM config lock timeout (PVE::AbstractConfig::lock_config: 10 s) plus a margin: a
 * change whose answer was lost can still be waiting for the lock that long, so only a read
 * after this horizon proves it did not land.
 */
export const DEFAULT_LAND_HORIZON_MS = 12_000;

export class Fences {
  private readonly byVolume = new Map<string, Set<Fence>>();

  constructor(private readonly landHorizonMs = DEFAULT_LAND_HORIZON_MS) {}

  /** Raises a fence; the returned function lifts it (after the horizon when the outcome is uncertain). */
  hold(volid: string, kind: FenceKind, vm?: VmRef): (o?: { uncertainSince?: number | undefined }) => void {
    const fence: Fence = { kind, vm: vm && { ...vm }, since: Date.now() };
    const set = this.byVolume.get(volid) ?? new Set<Fence>();
    set.add(fence);
    this.byVolume.set(volid, set);
    let lifted = false;
    return (o = {}) => {
      if (lifted) return;
      lifted = true;
      const lift = () => {
        set.delete(fence);
        if (set.size === 0 && this.byVolume.get(volid) === set) this.byVolume.delete(volid);
      };
      const wait = o.uncertainSince === undefined ? 0 : o.uncertainSince + this.landHorizonMs - Date.now();
      if (wait > 0) setTimeout(lift, wait).unref();
      else lift();
    };
  }

  /** Fences on the volume, oldest first. */
  of(volid: string): Fence[] {
    return [...(this.byVolume.get(volid) ?? [])].sort((a, b) => a.since - b.since);
  }

  get size(): number {
    return this.byVolume.size;
  }

  /** Every fence held now, with its volume (for the metrics of stuck fences). */
  list(): Array<{ volid: string; fence: Fence }> {
    return [...this.byVolume].flatMap(([volid, set]) => [...set].map((fence) => ({ volid, fence })));
  }

  /**
   * Refuses with ABORTED while the volume has a fence other than on `sameVm` (a change of that
   * VM's config is ordered by its queue and needs no fence against itself).
   */
  check(volid: string, action: string, sameVm?: number): void {
    const other = this.of(volid).find((f) => sameVm === undefined || f.vm?.vmid !== sameVm);
    if (!other) return;
    throw new Busy(
      `${action}: ${describe(volid, other)} may still take effect (sent ${Math.round((Date.now() - other.since) / 100) / 10} s ago); the volume stays fenced until it has landed or is proven not to have landed; retry later`,
    );
  }

  /**
   * Runs a mutation to its end whatever the caller does: the caller's promise rejects when its
   * signal aborts, the work goes on and holds the fence until it settles (until the horizon
   * when it ended with an uncertain outcome).
   */
  run<T>(
    volid: string,
    kind: FenceKind,
    vm: VmRef | undefined,
    work: () => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T> {
    if (signal?.aborted) return Promise.reject(new DeadlineExceeded(`cancelled before ${kind} of ${volid} was sent`));
    const lift = this.hold(volid, kind, vm);
    const started = Date.now();
    const p = work().then(
      (v) => {
        lift();
        return v;
      },
      (e: unknown) => {
        lift(outcomeUncertain(e) ? { uncertainSince: started } : {});
        throw e;
      },
    );
    if (!signal) return p;
    return new Promise<T>((resolve, reject) => {
      const onAbort = () =>
        reject(
          new DeadlineExceeded(
            `gave up waiting for ${kind} of ${volid}; it runs to its outcome in the background and the volume stays fenced until then`,
          ),
        );
      signal.addEventListener('abort', onAbort, { once: true });
      p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
    });
  }
}

function describe(volid: string, f: Fence): string {
  const where = f.vm ? ` VM ${f.vm.name} (${f.vm.vmid}) on ${f.vm.node}` : '';
  switch (f.kind) {
    case 'attach':
      return `an attach of ${volid} to${where}`;
    case 'helper-attach':
      return `an offline-expansion attach of ${volid} to${where}`;
    case 'detach':
      return `a detach of ${volid} from${where}`;
    case 'resize':
      return `a resize of ${volid}${where ? ` through${where}` : ''}`;
    case 'free':
      return `the deletion of ${volid}`;
    case 'modify':
      return `a drive option change of ${volid} on${where}`;
  }
}

/**
 * Waits for `p` until the signal aborts; then rejects at once while `p` goes on (its failure
 * is swallowed here: whoever started it owns it, and its fence keeps the volume safe).
 */
export function untilAborted<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return p;
  p.catch(() => undefined);
  if (signal.aborted)
    return Promise.reject(new DeadlineExceeded('gave up waiting; the change goes on in the background'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new DeadlineExceeded('gave up waiting; the change goes on in the background'));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
