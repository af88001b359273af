// How the attach queue reads a failed config change before it decides anything: the change may
// still have taken effect, so only a refusal with a known outcome is final. Every failure is
// followed by a read of the VM before a retry (attach-queue.ts).
import type { Logger } from 'pino';
import { isCsiError } from '../../../errors.js';
import { outcomeUncertain } from '../../api/errors.js';
import { backoffDelay, sleep } from '../../api/tasks.js';
import type { VmRef } from '../state/vm-locator.js';

/**
 * - busy: the VM was locked or its config changed since the read (ABORTED): nothing was done,
 *   read again and retry;
 * - uncertain: sent without a known outcome (lost answer, timeout): it may still land;
 * - refused: Proxmox answered that it cannot be done as asked (FAILED_PRECONDITION);
 * - failed: any other known failure.
 */
export type Failure = 'busy' | 'uncertain' | 'refused' | 'failed';

export function failureOf(e: unknown): Failure {
  if (isCsiError(e, 'Aborted')) return 'busy';
  if (outcomeUncertain(e)) return 'uncertain';
  if (isCsiError(e, 'FailedPrecondition')) return 'refused';
  return 'failed';
}

/** Logs a busy VM and, when `wait`, backs off before the next attempt. */
export async function retryBusy(
  log: Logger,
  vm: VmRef,
  attempt: number,
  e: unknown,
  doing: string,
  wait = true,
): Promise<void> {
  log.info({ vmid: vm.vmid, attempt, err: (e as Error).message }, `VM busy, retrying ${doing}`);
  if (wait) await sleep(backoffDelay(attempt));
}
