// Subcommands of the pve-nfs-csi program (`pve-nfs-csi <name> [flags]`). Without one, the
// program serves CSI (src/main.ts). Each subcommand lives in its own file and is registered here;
// `run` returns the exit code.
import type { Subcommand } from './subcommand.js';

type Loader = () => Promise<Subcommand>;

/** Loaded on demand, so serving CSI never imports a subcommand's code; `args` is the usage line's rest. */
const SUBCOMMANDS: Record<string, { args: string; load: Loader }> = {
  preflight: { args: '[flags]', load: async () => (await import('./preflight.js')).preflight },
  report: { args: '[--fix [--yes]] [flags]', load: async () => (await import('./report/command.js')).report },
  archives: { args: 'list|prune [flags]', load: async () => (await import('./archives.js')).archives },
  move: { args: 'NAMESPACE/CLAIM --to-zone HOST [flags]', load: async () => (await import('./move/command.js')).move },
};

export function subcommandNames(): string[] {
  return Object.keys(SUBCOMMANDS);
}

export function loadSubcommand(name: string): Promise<Subcommand> {
  const s = SUBCOMMANDS[name];
  if (!s) throw new Error(`no subcommand ${name}`);
  return s.load();
}

/**
 * The program's --help: how to serve, one line per subcommand (its usage and the summary it
 * gives itself), then the serving flags. Loads every subcommand, which only --help does.
 */
export async function programUsage(serveFlags: string): Promise<string> {
  const lines: [string, string][] = [['pve-nfs-csi [flags]', 'serve CSI (flags below)']];
  for (const [name, s] of Object.entries(SUBCOMMANDS))
    lines.push([`pve-nfs-csi ${name} ${s.args}`, (await s.load()).summary]);
  const width = Math.max(...lines.map(([usage]) => usage.length)) + 2;
  const rows = lines.map(([usage, summary], i) => `${i === 0 ? 'Usage: ' : '       '}${usage.padEnd(width)}${summary}`);
  return [...rows, '       (each subcommand explains its flags with --help)', serveFlags].join('\n');
}

/** The exit code of the subcommand argv[0] names, or undefined when argv is a serve invocation. */
export async function runSubcommand(argv: string[], io: Parameters<Subcommand['run']>[1]): Promise<number | undefined> {
  const name = argv[0];
  if (!name || name.startsWith('-')) return undefined;
  const sub = SUBCOMMANDS[name];
  if (!sub) {
    io.err.write(
      `pve-nfs-csi: unknown subcommand "${name}" (known: ${subcommandNames().join(', ')}; without one it serves CSI, see --help)\n`,
    );
    return 2;
  }
  return (await sub.load()).run(argv.slice(1), io);
}
