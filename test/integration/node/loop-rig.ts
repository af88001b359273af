// Real disks for node tests: sparse files on loop devices, announced through wwn-0x… links in a
// temp device dir, the way the simulator's loop backend does. Everything is torn down in the
// test's teardown, whether it passed or not: mounts under the temp root, loop devices, files.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { mountsUnder, unmountUnder } from '../../helpers/mounts.js';

export interface LoopDisk {
  file: string;
  device: string;
  wwn: string;
}

const run = (cmd: string, args: string[]) =>
  execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();

/** Why the loop-device tests cannot run here, or false: the shape tap's `skip` option takes. */
export function canUseLoopDevices(): string | false {
  if (process.getuid?.() !== 0) return 'needs root (losetup, mkfs, mount)';
  try {
    run('losetup', ['--version']);
    run('mkfs.xfs', ['-V']);
  } catch (e) {
    return `missing tool: ${(e as Error).message}`;
  }
  return false;
}

export class LoopRig {
  readonly root: string;
  readonly devDir: string;
  readonly disks: LoopDisk[] = [];

  constructor(t: { teardown(fn: () => void): void }) {
    this.root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'node-loop-test-')));
    this.devDir = path.join(this.root, 'by-id');
    fs.mkdirSync(this.devDir);
    t.teardown(() => this.cleanup());
  }

  path(...parts: string[]): string {
    return path.join(this.root, ...parts);
  }

  addDisk(sizeBytes: number, wwn: string): LoopDisk {
    const file = this.path(`disk-${wwn}.raw`);
    fs.closeSync(fs.openSync(file, 'w'));
    fs.truncateSync(file, sizeBytes);
    const device = run('losetup', ['-f', '--show', file]);
    const disk = { file, device, wwn };
    this.disks.push(disk);
    fs.symlinkSync(device, path.join(this.devDir, `wwn-0x${wwn}`));
    return disk;
  }

  /** What a Proxmox disk resize does to the guest: a bigger disk behind the same device. */
  grow(disk: LoopDisk, sizeBytes: number): void {
    fs.truncateSync(disk.file, sizeBytes);
    run('losetup', ['-c', disk.device]);
  }

  mountsUnderRoot(): string[] {
    return mountsUnder(this.root);
  }

  cleanup(): void {
    unmountUnder(this.root);
    for (const d of this.disks) {
      try {
        run('losetup', ['-d', d.device]);
      } catch {
        // already detached
      }
    }
    fs.rmSync(this.root, { recursive: true, force: true });
  }
}
