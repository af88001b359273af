// One call that starts a move or continues the recorded one (what `move --yes` does), for the
// CLI and the tests that interrupt it.
import { planMove } from './checks.js';
import { type MoveDeps, MoveRun, findRecord } from './run.js';

export { MoveIncomplete, MoveRolledBack, MoveRun, findRecord } from './run.js';
export { Refusal, isRefusal, planMove } from './checks.js';

export async function startOrResume(
  deps: MoveDeps,
  req: { namespace: string; name: string; toZone: string },
): Promise<MoveRun> {
  const recorded = await findRecord(deps.kube, req.namespace, req.name);
  if (recorded) return new MoveRun(deps, recorded);
  const plan = await planMove({ ...deps, ...req });
  const run = new MoveRun(deps, plan.record);
  await run.begin(plan.pv.metadata.resourceVersion);
  return run;
}
