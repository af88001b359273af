// V8 flags that must not be on node's command line but are wanted for the rest of the process's
// life (image/entrypoint.sh sets PVE_NFS_CSI_V8_FLAGS_AFTER_START to `--no-opt --no-maglev`).
// A code-generation flag given at start changes V8's flag hash, so the code cache in the node
// binary for its own modules and the bundle's compile cache are both refused and every function
// run at start is compiled again (+30-40 ms of CPU before the first Probe, bench/start.ts). Set
// once the sockets serve, they take effect for everything compiled from then on: nothing has been
// hot long enough to be optimised by then.
import v8 from 'node:v8';

/** Applies each flag of `env.PVE_NFS_CSI_V8_FLAGS_AFTER_START` (space-separated); returns them. */
export function applyLateV8Flags(env: NodeJS.ProcessEnv): string[] {
  const flags = (env['PVE_NFS_CSI_V8_FLAGS_AFTER_START'] ?? '').split(/\s+/).filter((f) => f !== '');
  for (const f of flags) v8.setFlagsFromString(f);
  return flags;
}
