// Conventions shared by the day-2 subcommands (report, archives, move; preflight predates them
// and keeps its own flags but the same exit codes):
//   - a dry run by default: a command that changes anything only says what it would do unless
//     given --yes (report additionally needs --fix to consider changes at all);
//   - a readable table on stdout, or one JSON document with --json (same content);
//   - progress and warnings on stderr, never mixed into the table or the JSON;
//   - exit codes scripts can rely on (EXIT below, documented in each --help and docs/day2.md).
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ConfigError } from '../config/errors.js';
import { parseDuration } from '../config/load.js';
import type { Subcommand } from './subcommand.js';

export const EXIT = {
  /** Nothing found, or everything asked for was done. */
  OK: 0,
  /** Something needs attention: findings, or a dry run that would change something. */
  FINDINGS: 1,
  /** Bad flags or arguments; nothing was done. */
  USAGE: 2,
  /** A call failed (API unreachable, permission missing, an action failed); the output says what. */
  FAILED: 3,
  /** Refused: a precondition does not hold (e.g. the volume is in use); nothing was changed. */
  REFUSED: 4,
} as const;

export const EXIT_CODES_HELP = `Exit codes: 0 nothing to do (or all done), 1 findings or a dry run with changes to make,
  2 bad usage, 3 a call or an action failed, 4 refused (a precondition does not hold).`;

export const COMMON_FLAGS_HELP = `  --json                 one JSON document instead of the table
  --kubeconfig FILE      kubeconfig (else KUBECONFIG, ~/.kube/config, then the pod's service account)
  --context NAME         kubeconfig context
  --config FILE          the driver's Proxmox config.yaml (env PROXMOX_CSI_CONFIG)
  --config-secret NS/NAME[:KEY]  read it from that Secret instead (key default config.yaml)
  --timeout DUR          bound for the whole run (default 10m)`;

/** Bad usage: exit 2 with this message. */
export class UsageError extends Error {
  override name = 'UsageError';
}
/** A precondition does not hold: exit 4 with this message. */
export class RefusedError extends Error {
  override name = 'RefusedError';
}

type Options = NonNullable<ParseArgsConfig['options']>;

export const COMMON_OPTIONS = {
  json: { type: 'boolean' },
  yes: { type: 'boolean' },
  kubeconfig: { type: 'string' },
  context: { type: 'string' },
  config: { type: 'string' },
  'config-secret': { type: 'string' },
  timeout: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies Options;

export interface CommonFlags {
  json: boolean;
  yes: boolean;
  help: boolean;
  kubeconfig?: string | undefined;
  context?: string | undefined;
  config?: string | undefined;
  configSecret?: { namespace: string; name: string; key: string } | undefined;
  timeoutMs: number;
}

export interface Parsed {
  common: CommonFlags;
  values: Record<string, string | boolean | string[] | boolean[] | undefined>;
  positionals: string[];
}

/** Parses common + command flags; UsageError names the command's --help. */
export function parseFlags(
  command: string,
  argv: string[],
  extra: Options = {},
  o: { positionals?: number } = {},
): Parsed {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: { ...COMMON_OPTIONS, ...extra },
      strict: true,
      allowPositionals: (o.positionals ?? 0) > 0,
    });
  } catch (e) {
    throw new UsageError(`${(e as Error).message.split('\n')[0]} (see ${command} --help)`);
  }
  const values = parsed.values as Parsed['values'];
  const { positionals } = parsed;
  if (positionals.length > (o.positionals ?? 0))
    throw new UsageError(`unexpected argument "${positionals[o.positionals ?? 0]}" (see ${command} --help)`);
  const str = (k: string): string | undefined => {
    const v = values[k];
    return typeof v === 'string' ? v : undefined;
  };
  let configSecret: CommonFlags['configSecret'];
  const cs = str('config-secret');
  if (cs !== undefined) {
    const m = /^(?<namespace>[a-z0-9-]+)\/(?<name>[a-z0-9.-]+)(?::(?<key>.+))?$/.exec(cs)?.groups;
    if (!m?.namespace || !m.name) throw new UsageError(`--config-secret: "${cs}" is not NAMESPACE/NAME[:KEY]`);
    configSecret = { namespace: m.namespace, name: m.name, key: m.key ?? 'config.yaml' };
  }
  let timeoutMs: number;
  try {
    timeoutMs = parseDuration(str('timeout') ?? '10m', 'timeout');
  } catch (e) {
    throw new UsageError(e instanceof ConfigError ? e.message : String(e));
  }
  const common: CommonFlags = {
    json: values.json === true,
    yes: values.yes === true,
    help: values.help === true,
    timeoutMs,
    ...(str('kubeconfig') !== undefined && { kubeconfig: str('kubeconfig') }),
    ...(str('context') !== undefined && { context: str('context') }),
    ...(str('config') !== undefined && { config: str('config') }),
    ...(configSecret && { configSecret }),
  };
  return { common, values, positionals };
}

/** A --flag's TCP port (1..65535); undefined when the flag is absent, UsageError otherwise. */
export function parsePort(v: unknown, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 65535)
    throw new UsageError(`--${flag}: "${typeof v === 'string' ? v : JSON.stringify(v)}" is not a TCP port`);
  return n;
}

const UNITS: Record<string, number> = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3, w: 7 * 86400e3 };

/** "90d", "12h", "2w", "1d12h" → milliseconds; UsageError otherwise. */
export function parseAge(raw: string, flag: string): number {
  const re = /(?<n>\d+)(?<unit>[smhdw])/gy;
  let total = 0;
  let end = 0;
  for (let m = re.exec(raw); m !== null; m = re.exec(raw)) {
    total += Number(m.groups?.n) * (UNITS[m.groups?.unit ?? ''] ?? NaN);
    end = re.lastIndex;
  }
  if (raw === '' || end !== raw.length) throw new UsageError(`--${flag}: "${raw}" is not an age like 90d, 12h or 2w`);
  return total;
}

/** 90d3h, 5h12m, 42s: the two largest units. */
export function formatAge(ms: number): string {
  if (!Number.isFinite(ms)) return '?';
  const s = Math.max(0, Math.floor(ms / 1000));
  const parts: Array<[number, string]> = [
    [Math.floor(s / 86400), 'd'],
    [Math.floor(s / 3600) % 24, 'h'],
    [Math.floor(s / 60) % 60, 'm'],
    [s % 60, 's'],
  ];
  const first = parts.findIndex(([n]) => n > 0);
  if (first < 0) return '0s';
  return parts
    .slice(first, first + 2)
    .filter(([n]) => n > 0)
    .map(([n, u]) => `${n}${u}`)
    .join('');
}

/** 1.5 GiB, 512 MiB, 12 KiB, 300 B. */
export function formatBytes(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return '?';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v >= 10 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}

/** Left-aligned columns separated by two spaces; empty cells print as "-". */
export function table(headers: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const cells: string[][] = [[...headers], ...rows.map((r) => headers.map((_, i) => r[i] || '-'))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return (
    cells.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ')).join('\n') + '\n'
  );
}

export type Io = Parameters<Subcommand['run']>[1];

/**
 * Runs a subcommand body with the conventions' error handling: UsageError → 2, RefusedError → 4,
 * anything else → 3, each with one line on stderr naming the command.
 */
export async function runCommand(command: string, io: Io, body: () => Promise<number>): Promise<number> {
  try {
    return await body();
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    io.err.write(`pve-nfs-csi ${command}: ${msg}\n`);
    if (e instanceof UsageError || e instanceof ConfigError) return EXIT.USAGE;
    if (e instanceof RefusedError) return EXIT.REFUSED;
    return EXIT.FAILED;
  }
}
