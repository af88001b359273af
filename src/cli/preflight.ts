// `pve-nfs-csi preflight`: before swapping proxmox-csi-plugin and csi-driver-nfs for this
// driver, check from where it runs that the swap will work and say what it changes. Inputs are
// files: the existing Secret's config.yaml and the chart values (complete, as
// `helm get values RELEASE --all -o yaml` or the chart's preflight hook renders them), optionally
// the PVs (`kubectl get pv -o json`). Prints a report (or --json); exit 0 = no failure, 1 = a
// check failed, 2 = bad usage.
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { ConfigError } from '../config/errors.js';
import { parseDuration } from '../config/load.js';
import { readProxmoxConfig } from '../config/proxmox-file.js';
import { scalarText } from '../config/text.js';
import type { Subcommand } from './subcommand.js';
import {
  checkNfs,
  checkProxmox,
  checkStorageClasses,
  checkSwap,
  isCheckFailure,
  type CheckResult,
  type PreflightInput,
  type StorageClassSpec,
} from './preflight-checks.js';

const USAGE = `Usage: pve-nfs-csi preflight [flags]
  --config FILE                            the Proxmox config.yaml of the existing Secret (env PROXMOX_CSI_CONFIG)
  --values FILE                            the chart values, complete (helm get values RELEASE --all -o yaml)
  --pvs FILE                               existing PersistentVolumes (kubectl get pv -o json), to find legacy NFS handles
  --previous-default-ondelete-policy P     csi-driver-nfs's controller.defaultOnDeletePolicy of the old release
  --nfs-port N --nfs-mount-port N          NFS server ports instead of its portmapper (as the driver's flags)
  --timeout DUR                            bound for each network call (default 10s)
  --json                                   machine-readable report
Exit code: 0 no check failed, 1 a check failed, 2 bad usage.`;

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function readYaml(file: string, flag: string): unknown {
  try {
    return parseYaml(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new ConfigError(
      `--${flag}: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
    );
  }
}

/** StorageClasses as the chart renders them: driver defaults overlaid key by key, "" removes. */
export function classesFromValues(values: Obj): StorageClassSpec[] {
  const out: StorageClassSpec[] = [];
  for (const driver of ['proxmox', 'nfs'] as const) {
    const d = isObj(values[driver]) ? values[driver] : {};
    if (d.enabled === false) continue;
    const defaults =
      isObj(d.storageClassDefaults) && isObj(d.storageClassDefaults.parameters)
        ? d.storageClassDefaults.parameters
        : {};
    for (const c of Array.isArray(d.storageClasses) ? d.storageClasses : []) {
      if (!isObj(c)) continue;
      const merged: Obj = { ...defaults, ...(isObj(c.parameters) ? c.parameters : {}) };
      const parameters = Object.fromEntries(
        Object.entries(merged)
          .map(([k, v]): [string, string] => [k, v === null || v === undefined ? '' : scalarText(v)])
          .filter(([, v]) => v !== ''),
      );
      out.push({ name: scalarText(c.name ?? '?'), driver, parameters });
    }
  }
  return out;
}

export async function runPreflight(input: PreflightInput, signal: AbortSignal): Promise<CheckResult[]> {
  const [proxmox, nfs] = await Promise.all([checkProxmox(input, signal), checkNfs(input, signal)]);
  return [...checkStorageClasses(input), ...proxmox, ...nfs, ...checkSwap(input)];
}

export function formatReport(results: CheckResult[]): string {
  const mark: Record<CheckResult['status'], string> = {
    pass: 'PASS',
    fail: 'FAIL',
    warn: 'WARN',
    info: 'INFO',
    skip: 'SKIP',
  };
  const lines = results.map((r) => `${mark[r.status]}  ${r.name}: ${r.message}`);
  const failed = results.filter(isCheckFailure).length;
  lines.push(
    '',
    failed === 0
      ? `preflight passed (${results.length} checks, ${results.filter((r) => r.status === 'warn').length} warnings)`
      : `preflight FAILED: ${failed} of ${results.length} checks failed`,
  );
  return lines.join('\n') + '\n';
}

function inputFrom(argv: string[], env: NodeJS.ProcessEnv): { input: PreflightInput; json: boolean } | 'help' {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      allowPositionals: false,
      strict: true,
      options: {
        config: { type: 'string' },
        values: { type: 'string' },
        pvs: { type: 'string' },
        'previous-default-ondelete-policy': { type: 'string' },
        'nfs-port': { type: 'string' },
        'nfs-mount-port': { type: 'string' },
        timeout: { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean' },
      },
    }));
  } catch (e) {
    throw new ConfigError(`${(e as Error).message.split('\n')[0]} (see preflight --help)`);
  }
  if (values.help) return 'help';
  const configFile = (values.config as string | undefined) ?? env.PROXMOX_CSI_CONFIG;
  const chart = values.values ? readYaml(values.values as string, 'values') : {};
  if (!isObj(chart)) throw new ConfigError('--values: expected a YAML mapping of chart values');
  const proxmoxOn = !(isObj(chart.proxmox) && chart.proxmox.enabled === false);
  const pvsDoc = values.pvs ? readYaml(values.pvs as string, 'pvs') : undefined;
  if (pvsDoc !== undefined && !(isObj(pvsDoc) && Array.isArray(pvsDoc.items)))
    throw new ConfigError('--pvs: expected `kubectl get pv -o json` output (an object with items)');
  const port = (flag: string): number | undefined => {
    const v = values[flag] as string | undefined;
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw new ConfigError(`--${flag}: "${v}" is not a TCP port`);
    return n;
  };
  const controller = isObj(chart.controller) ? chart.controller : {};
  const previous = values['previous-default-ondelete-policy'] as string | undefined;
  if (previous !== undefined && !['delete', 'retain', 'archive'].includes(previous.toLowerCase())) {
    throw new ConfigError(`--previous-default-ondelete-policy: "${previous}" must be delete, retain or archive`);
  }
  const nfsPort = port('nfs-port');
  const nfsMountPort = port('nfs-mount-port');
  return {
    json: values.json === true,
    input: {
      ...(proxmoxOn && configFile && { proxmox: readProxmoxConfig(configFile) }),
      classes: classesFromValues(chart),
      defaultOnDelete: scalarText(controller.defaultOnDeletePolicy ?? 'delete'),
      ...(previous && { previousDefaultOnDelete: previous }),
      ...(pvsDoc !== undefined && { pvs: (pvsDoc as { items: PreflightInput['pvs'] }).items }),
      ...(nfsPort !== undefined && { nfsPort }),
      ...(nfsMountPort !== undefined && { nfsMountPort }),
      timeoutMs: parseDuration((values.timeout as string | undefined) ?? '10s', 'timeout'),
    },
  };
}

export const preflight: Subcommand = {
  summary: 'check a cluster before the swap from the upstream drivers',
  async run(argv, io) {
    let parsed;
    try {
      parsed = inputFrom(argv, io.env);
    } catch (e) {
      if (e instanceof ConfigError) {
        io.err.write(`pve-nfs-csi preflight: ${e.message}\n`);
        return 2;
      }
      throw e;
    }
    if (parsed === 'help') {
      io.out.write(USAGE + '\n');
      return 0;
    }
    const results = await runPreflight(
      parsed.input,
      AbortSignal.timeout(Math.max(60_000, parsed.input.timeoutMs * 10)),
    );
    const ok = !results.some(isCheckFailure);
    io.out.write(parsed.json ? JSON.stringify({ ok, checks: results }, null, 2) + '\n' : formatReport(results));
    return ok ? 0 : 1;
  },
};
