// What a subcommand is (`pve-nfs-csi <name> [flags]`): its one-line summary and how it runs.
// Apart from the registry (index.ts), which loads each subcommand on demand, so a subcommand
// names its own type without importing the registry that imports it.
export interface Subcommand {
  summary: string;
  run(
    argv: string[],
    io: { out: NodeJS.WritableStream; err: NodeJS.WritableStream; env: NodeJS.ProcessEnv },
  ): Promise<number>;
}
