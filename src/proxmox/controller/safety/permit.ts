// The ownership gate's permits: leave to send exactly one mutating Proxmox call. One kind per
// decision of the gate; the body is what the call sends, nothing is added on the way. Only the
// gate's decision modules (ownership.ts for the controller, ownership-day2.ts for the day-2
// commands) import `mintPermit`; the ports (ownership-port.ts, mover-port.ts) take permits and
// check their kind at run time too (test/unit/proxmox/controller/safety/no-bypass.test.ts).
//
// Adding a mutating call (docs/ownership.md, "Adding a mutating call"): a body here, a decision
// in the gate that mints it (with its rule and unit tests), a port method that checks the kind
// and sends the body, and the API method in ProxmoxWriteApi or ProxmoxVmLifecycleWrite.
import type { AllocRequest, ConfigChange } from '../../api/api.js';
import type { CopyStep } from './copy-vms.js';

export interface PermitBodies {
  /** DeleteVolume (decideFree) and a modify's older markers (decideModify). */
  free: { node: string; storage: string; volid: string };
  /** CreateVolume (permitCreate) and a modify's marker (decideModify). */
  alloc: { node: string; storage: string; req: AllocRequest };
  resize: { node: string; vmid: number; key: string; size: string; digest?: string | undefined };
  config: { node: string; vmid: number; change: ConfigChange };
  unlink: { node: string; vmid: number; keys: string[]; digest?: string | undefined };
  /** A day-2 leftover (report --fix, a move's source copy): decideFreeLeftover. */
  'free-leftover': { node: string; storage: string; volid: string };
  /** move: the helper VM made holding the disk as unused0 (decideMoverCreate). */
  'mover-create': { node: string; vmid: number; options: Record<string, string> };
  /** move: an existing empty helper takes the disk as unused0 (decideMoverHold). */
  'mover-hold': { node: string; vmid: number; change: ConfigChange };
  /** move: the helper, holding only the disk, migrates offline (decideMoverMigrate). */
  'mover-migrate': { node: string; vmid: number; target: string };
  /** move: the helper lets go of the disk without freeing it (decideMoverRelease). */
  'mover-release': { node: string; vmid: number; change: ConfigChange };
  /** move: the helper, holding no volume, is destroyed (decideMoverDestroy). */
  'mover-destroy': { node: string; vmid: number };
  /** One call on a thin copy's helper VM (copy-vms.ts): create, hold, snapshot, clone, reassign, destroy. */
  copy: CopyStep;
}
export type PermitKind = keyof PermitBodies;

let mint: <K extends PermitKind>(kind: K, body: PermitBodies[K]) => OwnershipPermit<K>;

/** Leave to make one exact change; only the gate's decisions construct one. */
export class OwnershipPermit<K extends PermitKind> {
  readonly #kind: K;
  private constructor(
    readonly kind: K,
    readonly body: Readonly<PermitBodies[K]>,
  ) {
    this.#kind = kind;
  }
  static {
    mint = (kind, body) => new OwnershipPermit(kind, body);
  }
  /** The port checks the kind at run time too: a permit cast to another kind is refused. */
  is(kind: PermitKind): boolean {
    return this.#kind === kind;
  }
}

/** For the gate's decision modules only (no-bypass.test.ts checks who imports it). */
export const mintPermit = <K extends PermitKind>(kind: K, body: PermitBodies[K]): OwnershipPermit<K> =>
  mint(kind, body);

/** The port's run-time check: a real permit of this kind. */
export function checkPermit(p: OwnershipPermit<PermitKind>, kind: PermitKind): void {
  if (!(p instanceof OwnershipPermit) || !p.is(kind)) throw new Error(`ownership port: not a ${kind} permit`);
}
