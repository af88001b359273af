// The attach queue's jobs: what a caller asked for (attach-plan.ts requests) and how its promise
// is answered. A job is answered once; the flags say how far a batch took it, for cancellation.
import type { AttachRequest, DetachRequest, UpdateRequest } from './attach-plan.js';

interface JobBase {
  /** The batch decided this job (its change landed, failed, or was never sent). */
  done: boolean;
  /** Taken into a batch: its change may be sent; a caller giving up no longer removes it. */
  taken: boolean;
  /** The caller gave up after the job was taken: no new change is sent for it. */
  abandoned: boolean;
  /** When a change for it was sent without a known outcome (lost answer), for the fence. */
  uncertainSince?: number;
  reject(e: unknown): void;
}
export interface AttachJob extends JobBase {
  kind: 'attach';
  req: AttachRequest;
  /** Seen attached (an exclusive publish): answered only after the exclusivity re-check. */
  landedSlot?: number;
  resolve(slot: number): void;
}
export interface DetachJob extends JobBase {
  kind: 'detach';
  req: DetachRequest;
  resolve(): void;
}
export interface UpdateJob extends JobBase {
  kind: 'update';
  req: UpdateRequest;
  resolve(): void;
}
export type Job = AttachJob | DetachJob | UpdateJob;

/** What a caller asks for; the queue makes the job of it. */
export type NewJob =
  Pick<AttachJob, 'kind' | 'req'> | Pick<DetachJob, 'kind' | 'req'> | Pick<UpdateJob, 'kind' | 'req'>;

/** A caller's new job: not taken into a batch, not decided, not given up. */
export const NEW_JOB = { done: false, taken: false, abandoned: false } as const;

/** An attach still to be decided: neither answered nor landed awaiting the re-check. */
export const isOpen = (j: AttachJob): boolean => !j.done && j.landedSlot === undefined;

/** The requests of these jobs, in order: what the planners (attach-plan.ts) take. */
export const requestsOf = <J extends Job>(jobs: readonly J[]): Array<J['req']> => jobs.map((j) => j.req);

/** Answers the jobs a detach or update plan decided (refused, or already as asked); the rest stay open. */
export function answerPlanned<J extends DetachJob | UpdateJob>(
  open: J[],
  plan: { done: number[]; rejects: Map<number, Error> },
): J[] {
  plan.rejects.forEach((err, i) => open[i]?.reject(err));
  for (const i of plan.done) open[i]?.resolve();
  return open.filter((j) => !j.done);
}

/** A detach the queue makes itself (withdrawing an attach): answered into `outcome`, no caller. */
export function internalDetach(req: DetachRequest, outcome: { failed?: unknown }): DetachJob {
  return {
    kind: 'detach',
    req,
    done: false,
    taken: true,
    abandoned: false,
    resolve() {
      this.done = true;
    },
    reject(e: unknown) {
      this.done = true;
      outcome.failed = e;
    },
  };
}
