// Filesystem usage (statfs(2)) read by `stat -f` in a child process, so a dead NFS server makes the
// call time out instead of pinning one of libuv's four worker threads forever.
import { type Exec } from './exec.js';

export interface FsUsage {
  totalBytes: number;
  availableBytes: number;
  usedBytes: number;
  totalInodes: number;
  freeInodes: number;
  usedInodes: number;
}

export type StatFs = (path: string, timeoutMs?: number) => Promise<FsUsage>;

export function parseStatFs(out: string): FsUsage {
  const nums = out.trim().split(/\s+/).map(Number);
  if (nums.length !== 6 || nums.some((n) => !Number.isFinite(n) || n < 0)) {
    throw new Error(`unexpected output from stat -f: ${JSON.stringify(out)}`);
  }
  const [frsize, blocks, bfree, bavail, files, ffree] = nums as [number, number, number, number, number, number];
  return {
    totalBytes: blocks * frsize,
    availableBytes: bavail * frsize,
    usedBytes: (blocks - bfree) * frsize,
    totalInodes: files,
    freeInodes: ffree,
    usedInodes: Math.max(0, files - ffree),
  };
}

export function createStatFs(exec: Exec, opts: { bin?: string; timeoutMs?: number } = {}): StatFs {
  const bin = opts.bin ?? 'stat';
  return async (path, timeoutMs) => {
    // %S fragment size, %b blocks, %f free, %a free for unprivileged users, %c inodes, %d free inodes.
    const { stdout } = await exec.run(bin, ['-f', '-c', '%S %b %f %a %c %d', '--', path], {
      timeoutMs: timeoutMs ?? opts.timeoutMs ?? 5_000,
    });
    return parseStatFs(stdout);
  };
}
