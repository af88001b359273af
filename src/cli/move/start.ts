// The entry points of a move, one path for the command and for the tests that interrupt it:
// locateMove (the claim's recorded move, if any, and its region), clusterFor (the configured
// Proxmox cluster of that region), startOrResume (what `move --yes` does: continue the recorded
// move, or check and begin a new one) and abortMove (`move --abort --yes`).
import type { ProxmoxClusterConfig, ProxmoxConfig } from '../../config/types.js';
import { parseVolumeId } from '../../proxmox/index.js';
import type { MoveKube } from './kube-port.js';
import { type Plan, planMove } from './plan.js';
import { type MoveRecord, findRecord } from './record.js';
import { Refusal } from './refusal.js';
import { type MoveDeps, MoveRolledBack, MoveRun } from './run.js';

export { MoveIncomplete, MoveRolledBack, MoveRun, type MoveDeps } from './run.js';

export interface MoveRequest {
  namespace: string;
  name: string;
  /** The target host; without it only a recorded move is continued (or aborted). */
  toZone?: string | undefined;
}

export interface Located {
  /** The move of this claim recorded on a PV, when one was begun. */
  record?: MoveRecord | undefined;
  /** The region of the claim's volume: the recorded source, else its PV's handle. */
  region?: string | undefined;
}

/**
 * What is there for a move of this claim. A recorded move to another host than asked is
 * refused: it is finished (or aborted) first, never redirected half way.
 */
export async function locateMove(kube: MoveKube, req: MoveRequest): Promise<Located> {
  const { namespace, name } = req;
  const record = await findRecord(kube, namespace, name);
  if (record && req.toZone !== undefined && record.toZone !== req.toZone) {
    const claim = `${namespace}/${name}`;
    throw new Refusal(
      'other-move-recorded',
      `a move of ${claim} to ${record.toZone} is recorded (step ${record.step}); run move ${claim} --to-zone ${record.toZone} --yes to finish it, or --abort`,
    );
  }
  if (record) return { record, region: parseVolumeId(record.from)?.region };
  const pvc = await kube.getPvc(namespace, name);
  const pv = pvc?.spec.volumeName ? await kube.getPv(pvc.spec.volumeName) : undefined;
  const handle = pv?.spec.csi?.volumeHandle;
  return { region: handle ? parseVolumeId(handle)?.region : undefined };
}

/** The cluster of `region`; without a region (no Proxmox volume found) the first one, whose checks then refuse. */
export function clusterFor(cfg: ProxmoxConfig, region: string | undefined): ProxmoxClusterConfig {
  const cluster = cfg.clusters.find((c) => c.region === region) ?? (region === undefined ? cfg.clusters[0] : undefined);
  if (!cluster)
    throw new Refusal(
      'no-cluster',
      `no Proxmox cluster for region ${region} in the config (regions: ${cfg.clusters.map((c) => c.region).join(', ')})`,
    );
  return cluster;
}

/** The checks of a new move, nothing changed (the dry run). */
export function checkMove(deps: MoveDeps, req: MoveRequest & { toZone: string }): Promise<Plan> {
  return planMove({ ...deps, ...req });
}

/** Continues the recorded move, or checks and begins a new one; `run()` of the result does the rest. */
export async function startOrResume(deps: MoveDeps, req: MoveRequest & { toZone: string }): Promise<MoveRun> {
  const { record } = await locateMove(deps.kube, req);
  if (record) return new MoveRun(deps, record);
  const plan = await checkMove(deps, req);
  const run = new MoveRun(deps, plan.record);
  await run.begin(plan.pv.metadata.resourceVersion);
  return run;
}

/** The recorded move that --abort rolls back. */
export function recordToAbort(located: Located, req: MoveRequest): MoveRecord {
  if (!located.record) throw new Refusal('nothing-recorded', `no move of ${req.namespace}/${req.name} is recorded`);
  return located.record;
}

/** Rolls back the recorded move (possible until the disk is copied); the run's `done` says what it did. */
export async function abortMove(deps: MoveDeps, req: MoveRequest): Promise<MoveRun> {
  const record = recordToAbort(await locateMove(deps.kube, { ...req, toZone: undefined }), req);
  const run = new MoveRun(deps, record);
  try {
    await run.rollback('aborted on request');
  } catch (e) {
    if (!(e instanceof MoveRolledBack)) throw e;
  }
  return run;
}
