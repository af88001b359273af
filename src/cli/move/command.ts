// `pve-nfs-csi move NAMESPACE/CLAIM --to-zone HOST`: moves a Proxmox volume (an LVM-thin disk on
// one host's local storage) to another host of the same cluster and rebinds the same claim to it.
// Dry run by default (prints the plan); --yes acts; a run that was interrupted anywhere is
// continued by running the same command again; --abort rolls back a move that has not yet
// copied the disk. See docs/day2.md.
import { createHttpProxmoxApi } from '../../proxmox/index.js';
import {
  COMMON_FLAGS_HELP,
  EXIT,
  EXIT_CODES_HELP,
  type Io,
  UsageError,
  parseFlags,
  runCommand,
  table,
} from '../common.js';
import type { Subcommand } from '../subcommand.js';
import { kubeFrom, proxmoxConfigFrom } from '../sources.js';
import { moveKube } from './kube-adapter.js';
import { planSteps } from './plan.js';
import { type MoveRecord, STEPS } from './record.js';
import { isRefusal } from './refusal.js';
import {
  type MoveDeps,
  MoveIncomplete,
  MoveRolledBack,
  type MoveRun,
  abortMove,
  checkMove,
  clusterFor,
  locateMove,
  recordToAbort,
  startOrResume,
} from './start.js';

const USAGE = `Usage: pve-nfs-csi move NAMESPACE/CLAIM --to-zone HOST [--yes] [--abort] [flags]
Moves a Proxmox volume to the local storage of another host and rebinds the same claim to it.
The claim must not be in use (scale its workload to 0 first); afterwards scale it back up:
the claim keeps its namespace, name, labels and spec, and its pods may now run on HOST only.
  --to-zone HOST         the Proxmox host (topology.kubernetes.io/zone) to move to
  --yes                  act (without it: print the plan and change nothing)
  --abort                roll back a recorded move that has not copied the disk yet
${COMMON_FLAGS_HELP}
The copy takes as long as Proxmox needs for the disk: give large disks a --timeout (default 10m);
a run that stops waiting leaves the move recorded, and the same command continues it.
Proxmox privileges (beyond the CSI role): VM.Allocate, VM.Config.Options, VM.Migrate on
  /vms/<controllerVmID> (docs/proxmox-setup.md);
  Datastore.AllocateSpace on the storage. The run checks them first.
${EXIT_CODES_HELP}`;

interface Report {
  claim: string;
  toZone: string;
  action: 'plan' | 'moved' | 'rolled-back' | 'in-progress' | 'already-there';
  oldPv?: string;
  newPv?: string;
  from?: string;
  to?: string;
  step?: string;
  steps: string[];
  message?: string;
}

/** The report of a move that has a record on the PV: where it stands, no steps run yet. */
function recordedReport(claim: string, r: MoveRecord, toZone: string, action: Report['action']): Report {
  return { claim, toZone, action, oldPv: r.oldPv, newPv: r.newPv, from: r.from, to: r.to, step: r.step, steps: [] };
}

function print(io: Io, json: boolean, rep: Report): void {
  if (json) {
    io.out.write(`${JSON.stringify(rep, null, 2)}\n`);
    return;
  }
  const rows: string[][] = [
    ['claim', rep.claim],
    ['to zone', rep.toZone],
    ['result', rep.action],
    ...(rep.oldPv ? [['old PV', rep.oldPv]] : []),
    ...(rep.newPv ? [['new PV', rep.newPv]] : []),
    ...(rep.from ? [['from', rep.from]] : []),
    ...(rep.to ? [['to', rep.to]] : []),
    ...(rep.step ? [['recorded step', rep.step]] : []),
  ];
  io.out.write(table(['', ''], rows).split('\n').slice(1).join('\n'));
  if (rep.steps.length)
    io.out.write(
      `\n${rep.action === 'plan' ? 'would' : 'did'}:\n${rep.steps.map((s, i) => `  ${i + 1}. ${s}`).join('\n')}\n`,
    );
  if (rep.message) io.out.write(`\n${rep.message}\n`);
}

export const move: Subcommand = {
  summary: 'move a Proxmox volume to another host and rebind the same claim',
  run: (argv, io) =>
    runCommand('move', io, async () => {
      const { common, values, positionals } = parseFlags(
        'move',
        argv,
        { 'to-zone': { type: 'string' }, abort: { type: 'boolean' } },
        { positionals: 1 },
      );
      if (common.help) {
        io.out.write(`${USAGE}\n`);
        return EXIT.OK;
      }
      const target = positionals[0];
      const m = target ? /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/.exec(target) : null;
      const [namespace, name] = [m?.[1], m?.[3]];
      if (!namespace || !name)
        throw new UsageError(`expected NAMESPACE/CLAIM, got "${target ?? ''}" (see move --help)`);
      const abort = values.abort === true;
      const toZoneFlag = typeof values['to-zone'] === 'string' ? values['to-zone'] : undefined;
      if (!toZoneFlag && !abort) throw new UsageError('--to-zone HOST is required (see move --help)');
      const signal = AbortSignal.timeout(common.timeoutMs);
      const k = await kubeFrom(common, io.env);
      const kube = moveKube(k, signal);
      const cfg = await proxmoxConfigFrom(common, io.env, () => Promise.resolve(k), signal);
      if (!cfg)
        throw new UsageError(
          'no Proxmox config: pass --config FILE or --config-secret NS/NAME (or set PROXMOX_CSI_CONFIG)',
        );
      const log = (line: string) => io.err.write(`move: ${line}\n`);

      const req = { namespace, name, toZone: toZoneFlag };
      const located = await locateMove(kube, req);
      const recorded = located.record;
      const toZone = toZoneFlag ?? recorded?.toZone ?? '';
      const claim = `${namespace}/${name}`;
      const cluster = clusterFor(cfg, located.region);
      const api = createHttpProxmoxApi({ cluster });
      try {
        const deps: MoveDeps = { kube, api, region: cluster.region, vmid: cfg.controllerVmId, log, signal };
        if (abort) {
          const r = recordToAbort(located, req);
          const rep = recordedReport(claim, r, r.toZone, 'plan');
          if (!common.yes) {
            rep.message = `would roll back the move at step ${r.step} (possible until the disk is copied); --yes to do it`;
            print(io, common.json, rep);
            return EXIT.FINDINGS;
          }
          const run = await abortMove(deps, req);
          print(io, common.json, { ...rep, action: 'rolled-back', steps: run.done });
          return EXIT.OK;
        }
        if (recorded && !common.yes) {
          const rep = recordedReport(claim, recorded, toZone, 'in-progress');
          const left = STEPS.slice(STEPS.indexOf(recorded.step) + 1);
          rep.message = `a move is recorded at step ${recorded.step}; --yes continues it (${left.join(', ')})`;
          print(io, common.json, rep);
          return EXIT.FINDINGS;
        }
        const target = { namespace, name, toZone };
        try {
          if (!common.yes) {
            const r = (await checkMove(deps, target)).record;
            const { oldPv, newPv, from, to } = r;
            const steps = planSteps(r, cfg.controllerVmId);
            const message = 'dry run: nothing changed; --yes to move';
            print(io, common.json, { claim, toZone, action: 'plan', oldPv, newPv, from, to, steps, message });
            return EXIT.FINDINGS;
          }
          const run = await startOrResume(deps, target);
          return await execute(io, common.json, run, recordedReport(claim, run.record, toZone, 'in-progress'));
        } catch (e) {
          if (!isRefusal(e, 'already-there')) throw e;
          print(io, common.json, { claim, toZone, action: 'already-there', steps: [], message: e.message });
          return EXIT.OK;
        }
      } finally {
        await api.close();
      }
    }),
};

async function execute(io: Io, json: boolean, run: MoveRun, rep: Report): Promise<number> {
  try {
    await run.run();
  } catch (e) {
    const out = { ...rep, steps: run.done, step: run.record.step, message: e instanceof Error ? e.message : String(e) };
    if (e instanceof MoveRolledBack) {
      print(io, json, { ...out, action: 'rolled-back', message: `rolled back, nothing changed: ${out.message}` });
      return EXIT.FAILED;
    }
    print(io, json, {
      ...out,
      action: 'in-progress',
      message: `${out.message}\nThe move is recorded on PV ${run.record.oldPv}; run the same command again to continue.`,
    });
    return e instanceof MoveIncomplete ? EXIT.FINDINGS : EXIT.FAILED;
  }
  const r = run.record;
  print(io, json, {
    ...rep,
    action: 'moved',
    to: r.to,
    step: r.step,
    steps: run.done,
    message: `claim ${r.claim.namespace}/${r.claim.name} is bound to PV ${r.newPv} on ${r.toZone}; scale its workload back up`,
  });
  return EXIT.OK;
}
