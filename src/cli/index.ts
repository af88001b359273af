// Subcommands of the pve-nfs-csi program (`pve-nfs-csi <name> [flags]`). Without one, the
// program serves CSI (src/main.ts). Each subcommand lives in its own file and is registered here;
// `run` returns the exit code.
export interface Subcommand {
  summary: string;
  run(
    argv: string[],
    io: { out: NodeJS.WritableStream; err: NodeJS.WritableStream; env: NodeJS.ProcessEnv },
  ): Promise<number>;
}

type Loader = () => Promise<Subcommand>;

/** Loaded on demand, so serving CSI never imports a subcommand's code. */
const SUBCOMMANDS: Record<string, Loader> = {
  preflight: async () => (await import('./preflight.js')).preflight,
  move: async () => (await import('./move.js')).move,
  report: async () => (await import('./report/command.js')).report,
  archives: async () => (await import('./archives.js')).archives,
};

export function subcommandNames(): string[] {
  return Object.keys(SUBCOMMANDS);
}

/** The exit code of the subcommand argv[0] names, or undefined when argv is a serve invocation. */
export async function runSubcommand(argv: string[], io: Parameters<Subcommand['run']>[1]): Promise<number | undefined> {
  const name = argv[0];
  if (!name || name.startsWith('-')) return undefined;
  const load = SUBCOMMANDS[name];
  if (!load) {
    io.err.write(
      `pve-nfs-csi: unknown subcommand "${name}" (known: ${subcommandNames().join(', ')}; without one it serves CSI, see --help)\n`,
    );
    return 2;
  }
  return (await load()).run(argv.slice(1), io);
}
