// BlockDevices port and its Linux adapter: find a hot-plugged disk by WWN, probe and create
// filesystems, grow them, read sizes. Filesystem creation is only ever done by the caller after
// probe() reported an empty disk. That check is the guard: mkfs.ext4 overwrites silently when
// stdin is not a terminal; mkfs.xfs at least refuses without -f, which we never pass.
import fsSync, { promises as fs } from 'node:fs';
import path from 'node:path';
import { type Exec, isCommandError } from './exec.js';
import { isErrno } from './paths.js';
import { type DriverDisks, findScsiByWwn, foreignScsiSlots, isDriverScsiDisk, rescanScsiHosts } from './scsi.js';
import { readSignature, type Signature } from './signature.js';
import { listOrEmpty, readIfPresent, readOrEmpty } from './sysfs.js';

export type FsType = 'ext4' | 'xfs';

export interface FormatOptions {
  blockSize?: number;
  inodeSize?: number;
}

export interface ProbeResult {
  /** Filesystem signature (ext4, xfs, …), if any. */
  fsType?: string;
  /** Partition table type (gpt, dos), if any. */
  ptType?: string;
}

export interface FindOptions {
  /** How long to keep looking (after asking the SCSI hosts to rescan) before giving up. */
  waitMs?: number;
  signal?: AbortSignal;
}

export interface BlockDevices {
  /** Device node of the disk with this WWN (16 or 32 lowercase hex digits), or undefined. */
  findByWwn(wwn: string, opts?: FindOptions): Promise<string | undefined>;
  probe(device: string): Promise<ProbeResult>;
  /**
   * blkid -p's answer decided in-process from the device's first and last blocks when it is
   * "nothing" or "exactly ext4/xfs" (src/os/signature.ts); 'unknown' means: ask probe().
   */
  signature(device: string): Promise<Signature>;
  format(device: string, fsType: FsType, opts?: FormatOptions): Promise<void>;
  /** Size in bytes as the kernel sees it now. */
  size(device: string): Promise<number>;
  /** Ask the SCSI disk to re-read its capacity (after a resize on the hypervisor). */
  rescan(device: string): Promise<void>;
  /** Grow the filesystem to the device: ext* by device, xfs by mount point. */
  resizeFs(device: string, mountPath: string, fsType: string): Promise<void>;
  /** `major:minor` of a device node (or of a file a device node is bind-mounted on). */
  majMinOf(devicePath: string): Promise<string>;
  /** Device node for `major:minor`; undefined when the kernel no longer has that device. */
  deviceByMajMin(majMin: string): Promise<string | undefined>;
  /** The driver's SCSI slots (DriverDisks) occupied by disks this driver did not attach. */
  foreignSlots(): Promise<number>;
  /**
   * Whether `major:minor` is a disk this driver attached: a QEMU SCSI disk whose wwid is one of
   * the driver's WWNs (sysfs), or the target of a `wwn-0x<driver WWN>` link in the device dir.
   */
  isDriverDisk(majMin: string): Promise<boolean>;
  /** Whether the kernel has a block device `major:minor` at all (false once a disk is unplugged). */
  blockDeviceExists(majMin: string): Promise<boolean>;
  /** True when the first `bytes` of the device are not all zero (data without a known signature). */
  hasData(device: string, bytes?: number): Promise<boolean>;
}

export interface LinuxBlockDevicesOptions {
  exec: Exec;
  /** Which disks are the driver's (its WWN scheme and slots); the adapter knows neither. */
  driverDisks: DriverDisks;
  /** Where `wwn-0x…` links are looked for when sysfs has no such disk. Default /dev/disk/by-id. */
  deviceDir?: string;
  sysfsRoot?: string;
  devRoot?: string;
  pollMs?: number;
  defaultWaitMs?: number;
  /** Upper bound for mkfs/resize; long enough for a big disk, short enough to surface a hang. */
  longTimeoutMs?: number;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        resolve();
      },
      { once: true },
    );
  });

/** Fills `buf` from `position` (fewer bytes only at the end of the device); returns the count. */
async function readFully(handle: fs.FileHandle, buf: Buffer, position: number): Promise<number> {
  let n = 0;
  while (n < buf.length) {
    const { bytesRead } = await handle.read(buf, n, buf.length - n, position + n);
    if (bytesRead === 0) break;
    n += bytesRead;
  }
  return n;
}

export function parseBlkidExport(out: string): ProbeResult {
  const r: ProbeResult = {};
  for (const line of out.split('\n')) {
    const eq = line.indexOf('=');
    if (eq < 0) continue;
    const k = line.slice(0, eq);
    const v = line.slice(eq + 1).trim();
    if (k === 'TYPE' && v) r.fsType = v;
    if (k === 'PTTYPE' && v) r.ptType = v;
  }
  return r;
}

export function majMinFromRdev(rdev: bigint): string {
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn);
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & ~0xffn);
  return `${major}:${minor}`;
}

export function mkfsCommand(device: string, fsType: FsType, o: FormatOptions = {}): [string, string[]] {
  // -q: no progress lines. mkfs.ext4 writes ~30 small chunks (progress counters, backspaces)
  // that the node plugin reads one by one through execa under its interpreter-only V8 flags:
  // ~0.4 ms of its CPU and 1-2 ms of wall per format, for output nothing reads (bench/node.ts).
  // Errors still go to stderr, which CommandError keeps; mkfs.xfs still refuses an existing
  // filesystem (no -f), and mkfs.ext4's existing-filesystem question is never asked without a
  // terminal anyway: -q only drops the chatter.
  if (fsType === 'ext4') {
    // -m0: no root-reserved blocks on a single-purpose data disk (what Kubernetes' formatter does).
    const args = ['-q', '-m0'];
    if (o.blockSize) args.push('-b', String(o.blockSize));
    if (o.inodeSize) args.push('-I', String(o.inodeSize));
    return ['mkfs.ext4', [...args, device]];
  }
  const args = ['-q'];
  if (o.blockSize) args.push('-b', `size=${o.blockSize}`);
  if (o.inodeSize) args.push('-i', `size=${o.inodeSize}`);
  return ['mkfs.xfs', [...args, device]];
}

export function createLinuxBlockDevices(o: LinuxBlockDevicesOptions): BlockDevices {
  const exec = o.exec;
  const deviceDir = o.deviceDir ?? '/dev/disk/by-id';
  const sysfsRoot = o.sysfsRoot ?? '/sys';
  const devRoot = o.devRoot ?? '/dev';
  const pollMs = o.pollMs ?? 250;
  const defaultWaitMs = o.defaultWaitMs ?? 15_000;
  const longTimeoutMs = o.longTimeoutMs ?? 10 * 60_000;

  const viaSysfs = async (wwn: string) => {
    const d = await findScsiByWwn(sysfsRoot, wwn);
    if (!d?.blockName) return undefined;
    const node = path.join(devRoot, d.blockName);
    try {
      return fsSync.statSync(node).isBlockDevice() ? node : undefined;
    } catch (e) {
      if (isErrno(e, 'ENOENT')) return undefined; // kernel knows it, the node is not there yet
      throw e;
    }
  };

  // The device nodes and the by-id links live on devtmpfs: looked up in-thread, like sysfs.
  const viaLink = async (wwn: string) => {
    const link = path.join(deviceDir, `wwn-0x${wwn}`);
    try {
      const real = fsSync.realpathSync(link);
      return fsSync.statSync(real).isBlockDevice() ? real : undefined;
    } catch (e) {
      if (isErrno(e, 'ENOENT', 'ENOTDIR')) return undefined;
      throw e;
    }
  };

  const lookOnce = async (wwn: string) => (await viaSysfs(wwn)) ?? (await viaLink(wwn));

  return {
    async findByWwn(wwn, opts = {}) {
      const found = await lookOnce(wwn);
      if (found) return found;
      // Hot-plug normally shows up on its own; a rescan covers a missed event.
      await rescanScsiHosts(sysfsRoot);
      const deadline = Date.now() + (opts.waitMs ?? defaultWaitMs);
      while (Date.now() < deadline && !opts.signal?.aborted) {
        await sleep(Math.min(pollMs, Math.max(0, deadline - Date.now())), opts.signal);
        const again = await lookOnce(wwn);
        if (again) return again;
      }
      return undefined;
    },

    async probe(device) {
      try {
        // -p: read the disk itself, not blkid's cache, which can be stale right after a hot-plug.
        const { stdout } = await exec.run('blkid', ['-p', '-o', 'export', device], { timeoutMs: 60_000 });
        return parseBlkidExport(stdout);
      } catch (e) {
        if (isCommandError(e, 'exit') && e.exitCode === 2) return {}; // nothing recognised
        throw e;
      }
    },

    async signature(device) {
      const handle = await fs.open(device, 'r');
      try {
        const st = await handle.stat({ bigint: true });
        const sectors = Number(
          await readOrEmpty(path.join(sysfsRoot, 'dev', 'block', majMinFromRdev(st.rdev), 'size')),
        );
        const size = Number.isSafeInteger(sectors) && sectors > 0 ? sectors * 512 : 0;
        if (size === 0) return { kind: 'unknown' };
        return await readSignature(size, async (r) => {
          const buf = Buffer.allocUnsafe(r.length);
          return buf.subarray(0, await readFully(handle, buf, r.offset));
        });
      } finally {
        // The last close of a block device writes back and drops its page cache (1-3 ms on a
        // loop device here); nothing needs to wait for that: the mkfs, mount or blkid that
        // follows opens the device itself, and the kernel orders the opens and the close.
        void handle.close().catch(() => undefined);
      }
    },

    async format(device, fsType, opts = {}) {
      const [cmd, args] = mkfsCommand(device, fsType, opts);
      await exec.run(cmd, args, { timeoutMs: longTimeoutMs });
    },

    async size(device) {
      const { stdout } = await exec.run('blockdev', ['--getsize64', device], { timeoutMs: 30_000 });
      const n = Number(stdout.trim());
      if (!Number.isSafeInteger(n) || n < 0)
        throw new Error(`blockdev --getsize64 ${device} printed ${JSON.stringify(stdout)}`);
      return n;
    },

    async rescan(device) {
      let name: string;
      try {
        name = path.basename(await fs.realpath(device));
      } catch (e) {
        if (isErrno(e, 'ENOENT')) return;
        throw e;
      }
      try {
        await fs.writeFile(path.join(sysfsRoot, 'class', 'block', name, 'device', 'rescan'), '1');
      } catch (e) {
        // Loop and virtio-blk devices have no rescan file; their size is already current.
        if (!isErrno(e, 'ENOENT', 'ENOTDIR', 'EACCES', 'EPERM')) throw e;
      }
    },

    async resizeFs(device, mountPath, fsType) {
      if (fsType === 'xfs') {
        await exec.run('xfs_growfs', ['-d', mountPath], { timeoutMs: longTimeoutMs });
      } else if (/^ext[234]$/.test(fsType)) {
        await exec.run('resize2fs', [device], { timeoutMs: longTimeoutMs });
      } else {
        throw new Error(`cannot grow a ${fsType} filesystem (only ext4 and xfs)`);
      }
    },

    async majMinOf(devicePath) {
      // Through the pool, not in-thread like the reads above: a caller may hand it a mount target
      // (publications.ts), and a stat of a path on a dead network filesystem would block.
      const st = await fs.stat(devicePath, { bigint: true });
      if (!st.isBlockDevice()) throw new Error(`${devicePath} is not a block device`);
      return majMinFromRdev(st.rdev);
    },

    async deviceByMajMin(majMin) {
      const uevent = await readIfPresent(path.join(sysfsRoot, 'dev', 'block', majMin, 'uevent'));
      if (uevent === undefined) return undefined;
      const name = /^DEVNAME=(.+)$/m.exec(uevent)?.[1]?.trim();
      return name ? path.join(devRoot, name) : undefined;
    },

    foreignSlots: () => foreignScsiSlots(sysfsRoot, o.driverDisks),

    async isDriverDisk(majMin) {
      const dev = path.join(sysfsRoot, 'dev', 'block', majMin, 'device');
      const [vendor, wwid] = await Promise.all([
        readOrEmpty(path.join(dev, 'vendor')),
        readOrEmpty(path.join(dev, 'wwid')),
      ]);
      if (isDriverScsiDisk({ vendor, wwid }, o.driverDisks)) return true;
      // The device dir is /dev/disk/by-id (devtmpfs): listed and stat'ed in-thread, like sysfs.
      for (const name of await listOrEmpty(deviceDir)) {
        const hex = /^wwn-0x([0-9a-fA-F]+)$/.exec(name)?.[1];
        if (!hex || !o.driverDisks.ownsWwn(hex.toLowerCase())) continue;
        try {
          const st = fsSync.statSync(path.join(deviceDir, name), { bigint: true });
          if (st.isBlockDevice() && majMinFromRdev(st.rdev) === majMin) return true;
        } catch (e) {
          if (!isErrno(e, 'ENOENT', 'ENOTDIR')) throw e;
        }
      }
      return false;
    },

    async blockDeviceExists(majMin) {
      try {
        await Promise.resolve().then(() => fsSync.accessSync(path.join(sysfsRoot, 'dev', 'block', majMin)));
        return true;
      } catch (e) {
        if (isErrno(e, 'ENOENT', 'ENOTDIR')) return false;
        throw e;
      }
    },

    async hasData(device, bytes = 1024 * 1024) {
      const handle = await fs.open(device, 'r');
      try {
        // One read and a memcmp against zeros: 16 reads of 64 KiB and a byte loop in JS took
        // 3-10 ms of every first stage (bench/node.ts).
        const buf = Buffer.allocUnsafe(bytes);
        const n = await readFully(handle, buf, 0);
        return !buf.subarray(0, n).equals(Buffer.alloc(n));
      } finally {
        await handle.close();
      }
    },
  };
}
