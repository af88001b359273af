// Loop-device hot-plug: a plugged disk is a loop device over the volume's sparse file plus a link
// `<linkDir>/<vm name>/wwn-0x…` -> /dev/loopN. A node plugin on this host started with
// `--device-dir <linkDir>/<its node name>` finds the disk there. The subdirectory is per VM because
// WWNs are per slot and two VMs can both use slot 1.

import { mkdir, readdir, rm, rmdir, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Exec, Hotplug, PlugDisk, VmRef } from './types.js';

interface Plugged {
  dev: string;
  file: string;
  link?: string;
  vmName: string;
}

export class LoopHotplug implements Hotplug {
  private plugged = new Map<string, Plugged>();

  constructor(
    private readonly exec: Exec,
    private readonly linkDir: string,
  ) {}

  private key(vmid: number, slot: string): string {
    return `${vmid}:${slot}`;
  }

  async plug(vm: VmRef, disk: PlugDisk): Promise<void> {
    const key = this.key(vm.vmid, disk.slot);
    const existing = this.plugged.get(key);
    if (existing && existing.file === disk.filePath) return;
    if (existing) await this.unplug(vm, disk.slot);
    const dev = (await this.exec('losetup', ['--find', '--show', disk.filePath])).trim();
    const entry: Plugged = { dev, file: disk.filePath, vmName: vm.name };
    this.plugged.set(key, entry);
    if (disk.wwn) {
      const dir = join(this.linkDir, vm.name);
      await mkdir(dir, { recursive: true });
      const link = join(dir, `wwn-${disk.wwn.toLowerCase()}`);
      await rm(link, { force: true });
      await symlink(dev, link);
      entry.link = link;
    }
  }

  async unplug(vm: VmRef, slot: string): Promise<void> {
    const key = this.key(vm.vmid, slot);
    const entry = this.plugged.get(key);
    if (!entry) return;
    if (entry.link) await rm(entry.link, { force: true });
    await this.exec('losetup', ['--detach', entry.dev]);
    this.plugged.delete(key);
    await this.removeDirIfEmpty(join(this.linkDir, entry.vmName));
  }

  /** A loop device has no I/O throttling; the limits live in the VM config only. */
  async throttle(): Promise<void> {}

  async resize(vm: VmRef, slot: string): Promise<void> {
    const entry = this.plugged.get(this.key(vm.vmid, slot));
    if (entry) await this.exec('losetup', ['--set-capacity', entry.dev]);
  }

  /** Loop device of a plugged slot (for tests and the admin state dump). */
  deviceOf(vmid: number, slot: string): string | undefined {
    return this.plugged.get(this.key(vmid, slot))?.dev;
  }

  async close(): Promise<void> {
    const errors: string[] = [];
    for (const [key, entry] of [...this.plugged]) {
      try {
        if (entry.link) await rm(entry.link, { force: true });
        await this.exec('losetup', ['--detach', entry.dev]);
      } catch (e) {
        errors.push((e as Error).message);
      }
      this.plugged.delete(key);
      await this.removeDirIfEmpty(join(this.linkDir, entry.vmName));
    }
    if (errors.length > 0) throw new Error(`loop backend cleanup: ${errors.join('; ')}`);
  }

  private async removeDirIfEmpty(dir: string): Promise<void> {
    try {
      if ((await readdir(dir)).length === 0) await rmdir(dir);
    } catch {
      // already gone or not empty: nothing to clean
    }
  }
}

export class NoopHotplug implements Hotplug {
  async plug(): Promise<void> {}
  async unplug(): Promise<void> {}
  async resize(): Promise<void> {}
  async throttle(): Promise<void> {}
  async close(): Promise<void> {}
}
