// Runs a test file inside its own mount namespace (unshare -m, private propagation), so a test
// that drives unmounts with hostile paths — or code that still has the bug it checks for — can
// never unmount anything of the host. The file calls this first; in the parent it re-executes
// itself under unshare and exits with the child's status, so tap sees the child's output only.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const MARK = 'PVE_NFS_CSI_PRIVATE_MOUNT_NS';

/** Why this file cannot run in a private mount namespace here, or undefined when it can / does. */
export function privateMountNsUnavailable(): string | undefined {
  if (process.env[MARK] === '1') return undefined;
  if (process.getuid?.() !== 0) return 'needs root (unshare -m)';
  const probe = spawnSync('unshare', ['-m', '--propagation', 'private', 'true'], { stdio: 'ignore' });
  return probe.status === 0 ? undefined : 'unshare -m does not work here';
}

/**
 * In the parent: run `moduleUrl` again inside `unshare -m --propagation private` and exit with
 * its status. In the child (or when a private namespace is impossible): return, and the caller
 * runs its tests (skipping them when `privateMountNsUnavailable()` says why).
 */
export function reexecInPrivateMountNs(moduleUrl: string): void {
  if (process.env[MARK] === '1' || privateMountNsUnavailable()) return;
  const file = fileURLToPath(moduleUrl);
  const r = spawnSync('unshare', ['-m', '--propagation', 'private', process.execPath, ...process.execArgv, file], {
    stdio: 'inherit',
    env: { ...process.env, [MARK]: '1' },
  });
  process.exit(r.status ?? 1);
}

export function inPrivateMountNs(): boolean {
  return process.env[MARK] === '1';
}
