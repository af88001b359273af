// `pve-nfs-csi report [--fix [--yes]]`: what is left over or unhealthy, across every Proxmox
// cluster of the driver's config and every NFS StorageClass (see findings.ts for each kind and
// for what --fix may remove). Conventions and exit codes: ../common.ts.
import { destination, pino } from 'pino';
import type { ProxmoxConfig } from '../../config/types.js';
import type { KubeApi } from '../../k8s/index.js';
import { createNfsStores } from '../../nfs/controller/store/stores.js';
import { createHttpProxmoxApi, type HttpProxmoxApi } from '../../proxmox/api/http-api.js';
import type { Core } from '../../proxmox/controller/core.js';
import {
  COMMON_FLAGS_HELP,
  EXIT,
  EXIT_CODES_HELP,
  formatAge,
  formatBytes,
  parseFlags,
  parsePort,
  RefusedError,
  runCommand,
  table,
  UsageError,
} from '../common.js';
import type { Subcommand } from '../subcommand.js';
import { effectiveMissing, fixNeeds, reportNeeds, type Need } from '../privileges.js';
import { kubeFrom, proxmoxConfigFrom } from '../sources.js';
import { nfsClasses, readCluster, readKube, readNfs, PROXMOX_DRIVER, type ClusterFacts } from './facts.js';
import { INFO_KINDS, proxmoxFindings, type Finding } from './findings.js';
import { checkPvDirs } from './missing-dirs.js';
import { nfsFindings } from './nfs-findings.js';
import { runAction } from './fix.js';
import { parseDuration } from '../../config/load.js';

const USAGE = `Usage: pve-nfs-csi report [--fix [--yes]] [flags]
Lists what is left over or unhealthy, across every Proxmox cluster of the driver's config and
every NFS StorageClass: orphaned disks (named by the driver's scheme, no PV), disks attached to a
VM without a VolumeAttachment, pending deletes and unusedN entries of driver disks, helper
attachments of interrupted offline expansions, NFS claim directories without a PV, archives
(age, size), PVs whose disk or directory is missing.
  --fix                  also list what may be removed: only leftovers provably the driver's and
                         unused (docs/day2.md); nothing is changed without --yes
  --yes                  with --fix: remove them
  --grace DUR            leave disks and directories younger than this alone (default 1h): a
                         CreateVolume in flight has them before its PV exists
  --no-sizes             do not measure archive sizes (walks every archived tree)
  --nfs-port N --nfs-mount-port N   NFS server ports instead of its portmapper (as the driver's flags)
${COMMON_FLAGS_HELP}
Proxmox privileges: report needs VM.Audit on /vms, Datastore.Audit on /storage and VM.Config.Disk
on /vms/<controllerVmID> (or Datastore.Allocate on the storages); --fix also Datastore.Allocate on
/storage and VM.Config.Disk on /vms. The driver's CSI role has all of them.
${EXIT_CODES_HELP}`;

export interface ReportResult {
  ok: boolean;
  fix: 'off' | 'dry-run' | 'applied';
  findings: Finding[];
  privileges: Array<{ region: string; missing: Need[] }>;
}

export function formatFindings(r: ReportResult): string {
  const lines: string[] = [];
  for (const p of r.privileges) {
    if (p.missing.length)
      lines.push(
        `proxmox/${p.region}: the credentials lack ${p.missing.map((m) => `${m.privilege} on ${m.path} (${m.why})`).join('; ')}`,
      );
  }
  const shown = r.findings;
  if (shown.length === 0) lines.push('nothing to report');
  else {
    const fixCol = r.fix !== 'off';
    const rows = shown.map((f) => [
      f.kind,
      f.where,
      f.what,
      f.ageMs !== undefined ? formatAge(f.ageMs) : '',
      f.sizeBytes !== undefined ? formatBytes(f.sizeBytes) : '',
      f.detail,
      ...(fixCol
        ? [f.result ?? (f.action ? (r.fix === 'dry-run' ? 'would remove' : 'remove') : f.kept ? `kept: ${f.kept}` : '')]
        : []),
    ]);
    lines.push(table(['KIND', 'WHERE', 'WHAT', 'AGE', 'SIZE', 'DETAIL', ...(fixCol ? ['FIX'] : [])], rows).trimEnd());
  }
  const problems = shown.filter((f) => !INFO_KINDS.has(f.kind) && !f.result?.startsWith('done'));
  const fixable = shown.filter((f) => f.action).length;
  lines.push(
    '',
    `${problems.length} finding(s), ${shown.length - problems.length} informational` +
      (r.fix === 'dry-run' ? `; ${fixable} removable: run again with --fix --yes to remove them` : '') +
      (r.fix === 'applied'
        ? `; ${shown.filter((f) => f.result?.startsWith('done')).length} removed, ${shown.filter((f) => f.result?.startsWith('failed')).length} failed`
        : ''),
  );
  return lines.join('\n') + '\n';
}

async function run(argv: string[], io: Parameters<Subcommand['run']>[1]): Promise<number> {
  const { common, values } = parseFlags('report', argv, {
    fix: { type: 'boolean' },
    grace: { type: 'string' },
    'no-sizes': { type: 'boolean' },
    'nfs-port': { type: 'string' },
    'nfs-mount-port': { type: 'string' },
  });
  if (common.help) {
    io.out.write(USAGE + '\n');
    return EXIT.OK;
  }
  const fix = values.fix === true;
  if (common.yes && !fix) throw new UsageError('--yes only goes with --fix (report alone changes nothing)');
  const graceMs = parseDuration(typeof values.grace === 'string' ? values.grace : '1h', 'grace');
  const nfsPort = parsePort(values['nfs-port'], 'nfs-port');
  const mountPort = parsePort(values['nfs-mount-port'], 'nfs-mount-port');
  const signal = AbortSignal.timeout(common.timeoutMs);
  const log = pino({ level: io.env.PVE_NFS_CSI_LOG_LEVEL ?? 'silent' }, destination(2));

  let kube: KubeApi | undefined;
  const getKube = async () => (kube ??= await kubeFrom(common, io.env));
  const k = await readKube(await getKube(), signal);
  const config: ProxmoxConfig | undefined = await proxmoxConfigFrom(common, io.env, getKube, signal);
  const usesProxmox =
    k.pvs.some((pv) => pv.spec?.csi?.driver === PROXMOX_DRIVER) ||
    k.classes.some((c) => c.provisioner === PROXMOX_DRIVER);
  if (!config && usesProxmox)
    throw new UsageError(
      "Proxmox volumes exist but no Proxmox config was given: pass --config FILE or --config-secret NAMESPACE/NAME (the driver's Secret)",
    );

  const now = Date.now();
  const rules = { controllerVmId: config?.controllerVmId ?? 9999, graceMs, now };
  const findings: Finding[] = [];
  const privileges: ReportResult['privileges'] = [];
  const apis: HttpProxmoxApi[] = [];
  const clusters = new Map<string, ClusterFacts>();
  const stores = createNfsStores({
    timeoutMs: Math.min(common.timeoutMs, 30_000),
    nfsPort,
    mountPort,
    privilegedPort: true,
    log,
  });
  try {
    for (const c of config?.clusters ?? []) {
      try {
        const api = createHttpProxmoxApi({ cluster: c, queryTimeoutMs: 30_000 });
        apis.push(api);
        const facts = await readCluster(c.region, api, rules.controllerVmId, log, signal);
        clusters.set(c.region, facts);
        const needs = fix
          ? fixNeeds(rules.controllerVmId, { helperVms: (facts.helpers ?? []).length > 0 })
          : reportNeeds(rules.controllerVmId);
        const missing = effectiveMissing(await api.permissions({ signal }), needs, [
          ...new Set(facts.storages.map((s) => s.storage)),
        ]);
        privileges.push({ region: c.region, missing });
        findings.push(...proxmoxFindings(facts, k, rules));
      } catch (e) {
        findings.push({ kind: 'error', where: `proxmox/${c.region}`, what: c.url, detail: (e as Error).message });
      }
    }
    const nfs = await readNfs(nfsClasses(k.classes), k.pvs, stores, { signal, sizes: values['no-sizes'] !== true });
    findings.push(...nfsFindings(nfs, k, rules));
    findings.push(...(await checkPvDirs(k.pvs, stores, signal)));

    let mode: ReportResult['fix'] = fix ? 'dry-run' : 'off';
    if (fix && common.yes) {
      const lacking = privileges.filter((p) => p.missing.length);
      if (lacking.length) {
        io.out.write(
          common.json
            ? JSON.stringify({ ok: false, fix: 'refused', findings, privileges }, null, 2) + '\n'
            : formatFindings({ ok: false, fix: 'dry-run', findings, privileges }),
        );
        throw new RefusedError(
          `--fix refused: the Proxmox credentials of ${lacking.map((p) => p.region).join(', ')} lack privileges (listed above); what they cannot see could look unused`,
        );
      }
      if (findings.some((f) => f.kind === 'error')) {
        io.out.write(
          common.json
            ? JSON.stringify({ ok: false, fix: 'refused', findings, privileges }, null, 2) + '\n'
            : formatFindings({ ok: false, fix: 'dry-run', findings, privileges }),
        );
        throw new RefusedError(
          '--fix refused: part of the scan failed (errors above); nothing is removed on a partial view',
        );
      }
      mode = 'applied';
      const core: Core = {
        clusters: new Map([...clusters].map(([r, f]) => [r, f.cluster])),
        defaultRegion: config?.clusters[0]?.region ?? '',
        controllerVmId: rules.controllerVmId,
        log,
      };
      const ctx = { core, kube: await getKube(), stores, nfs, log, signal };
      // Config entries first (one VM at a time through its queue), then disks and directories.
      const order = ['drop-unused', 'unlink-helpers', 'delete-volume', 'free-marker', 'remove-helper', 'remove-dir'];
      const todo = findings.flatMap((f) => (f.action ? [{ f, action: f.action }] : []));
      for (const { f, action } of todo.sort((a, b) => order.indexOf(a.action.type) - order.indexOf(b.action.type))) {
        try {
          f.result = `done: ${await runAction(ctx, action)}`;
        } catch (e) {
          f.result = `failed: ${(e as Error).message}`;
        }
        io.err.write(`${f.kind} ${f.what}: ${f.result}\n`);
      }
    }
    const problems = findings.filter((f) => !INFO_KINDS.has(f.kind) && !f.result?.startsWith('done'));
    const failed =
      findings.some((f) => f.kind === 'error' || f.result?.startsWith('failed')) ||
      privileges.some((p) => p.missing.length);
    const result: ReportResult = { ok: problems.length === 0 && !failed, fix: mode, findings, privileges };
    io.out.write(common.json ? JSON.stringify(result, null, 2) + '\n' : formatFindings(result));
    if (failed) return EXIT.FAILED;
    return problems.length ? EXIT.FINDINGS : EXIT.OK;
  } finally {
    await Promise.all(apis.map((a) => a.close()));
    await stores.close();
  }
}

export const report: Subcommand = {
  summary:
    'what is left over or unhealthy (orphaned disks and directories, stale attachments, archives); --fix --yes removes provable leftovers',
  run: (argv, io) => runCommand('report', io, () => run(argv, io)),
};
