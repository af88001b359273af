// Why `move` will not act. Each refusal carries a reason a caller branches on (the command treats
// "already there" as success, the tests name the refusal they expect) and a message a person can
// act on. A Refusal is a RefusedError: the command prints it and exits 4, with nothing changed.
import { RefusedError } from '../common.js';

export type RefusalReason =
  // the claim and its PV
  | 'claim-not-found'
  | 'claim-not-bound'
  | 'pv-not-found'
  | 'move-recorded'
  | 'other-move-recorded'
  | 'nothing-recorded'
  | 'pv-changed'
  | 'nfs-volume'
  | 'not-proxmox'
  | 'handle-without-zone'
  | 'other-region'
  | 'no-cluster'
  | 'already-there'
  | 'replacement-pv-exists'
  // who uses it
  | 'attached'
  | 'in-use'
  | 'disk-in-vm-config'
  // the Proxmox side
  | 'unknown-zone'
  | 'no-storage-on-target'
  | 'disk-missing'
  | 'target-disk-exists'
  | 'vmid-taken'
  | 'mover-busy'
  | 'privileges-unreadable'
  | 'privileges-missing';

export class Refusal extends RefusedError {
  override name = 'Refusal';
  constructor(
    readonly reason: RefusalReason,
    message: string,
  ) {
    super(message);
  }
}

/** A refusal, or with `reason` that refusal only. */
export const isRefusal = (e: unknown, reason?: RefusalReason): e is Refusal =>
  e instanceof Refusal && (reason === undefined || e.reason === reason);
