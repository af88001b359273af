// Test teardown for real mounts: what is mounted below a temp root, and unmounting all of it
// (innermost first, lazily if busy) so a failed test never leaves a mount behind.
import { execFileSync } from 'node:child_process';

const run = (cmd: string, args: string[]) =>
  execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();

export function mountsUnder(root: string): string[] {
  const doc = JSON.parse(run('findmnt', ['-J', '-l', '-o', 'TARGET'])) as { filesystems?: { target: string }[] };
  return (doc.filesystems ?? []).map((f) => f.target).filter((p) => p === root || p.startsWith(`${root}/`));
}

export function unmountUnder(root: string, rounds = 20): void {
  for (let i = 0; i < rounds; i++) {
    const mounts = mountsUnder(root);
    if (mounts.length === 0) return;
    for (const m of mounts.reverse()) {
      try {
        run('umount', [m]);
      } catch {
        try {
          run('umount', ['-l', m]);
        } catch {
          // gone already
        }
      }
    }
  }
}
