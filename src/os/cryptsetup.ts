// Cryptsetup port and its Linux adapter: LUKS2 format/open/close/resize through the cryptsetup
// binary, and the kernel's view of open dm-crypt mappings read from sysfs (no udev needed).
//
// The passphrase only ever travels on the child's stdin (`--key-file=-`): never in argv (which
// every process on the node can read in /proc), never in a file, never in an error message.
// With `--key-file=-` cryptsetup takes stdin byte for byte as the key (a trailing newline is
// part of it), which is how proxmox-csi-plugin passes the Secret's value, so a volume formatted
// by one driver opens with the other.
//
// Layout written by format(), matching proxmox-csi-plugin (which formats through
// siderolabs/go-blockdevice's luks package): LUKS2, cipher aes-xts-plain64, 512-bit volume key,
// cryptsetup's default PBKDF (argon2id), default sector size, one key slot.
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { type Exec, isCommandError } from './exec.js';
import { isErrno } from './paths.js';
import { listOrEmpty, readIfPresent } from './sysfs.js';

export const LUKS_TYPE = 'luks2';
export const LUKS_CIPHER = 'aes-xts-plain64';
export const LUKS_KEY_BITS = 512;

/** An active device-mapper crypt target, as the kernel reports it. */
export interface CryptMapping {
  /** dm name (what `cryptsetup open` was given; /dev/mapper/<name>). */
  name: string;
  /** A device node for it: /dev/mapper/<name> when present, else /dev/dm-N. */
  device: string;
  majMin: string;
  /** `major:minor` of the devices it sits on. */
  backing: string[];
  /** Kernel names (sdb…) of the devices it sits on. */
  backingNames: string[];
  /** Something is stacked on top of it or holds it open (a mount, another dm target). */
  inUse: boolean;
}

/** The passphrase did not open any key slot. */
export class LuksKeyRejected extends Error {
  constructor(device: string, detail: string) {
    super(`no LUKS key slot of ${device} accepts the given passphrase${detail ? ` (${detail})` : ''}`);
    this.name = 'LuksKeyRejected';
  }
}

/** The mapping or device is in use and cannot be closed or opened under this name. */
export class LuksBusy extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LuksBusy';
  }
}

export interface Cryptsetup {
  /** LUKS2-format `device` (which the caller has proved empty) with one key slot for `passphrase`. */
  format(device: string, passphrase: string): Promise<void>;
  /** Open the LUKS `device` as /dev/mapper/<name>; resolves to the mapping. */
  open(device: string, name: string, passphrase: string): Promise<CryptMapping>;
  /** Close the mapping; one that is not open is success. */
  close(name: string): Promise<void>;
  /** Grow the mapping to its device. The passphrase is needed when the key sits in the kernel keyring. */
  resize(name: string, passphrase?: string): Promise<void>;
  /**
   * Where the open mapping's data sits on its device, in bytes (`cryptsetup status`, no key
   * needed): offset + size = the device's size once the mapping spans all of it.
   */
  span(name: string): Promise<{ offset: number; size: number } | undefined>;
  /**
   * Number of key slots in the LUKS2 header of `device`; undefined when it cannot tell (LUKS1,
   * no readable header). Zero means the header can never be opened: what a luksFormat killed
   * between writing the header and adding the key slot leaves behind (argon2id takes seconds).
   */
  keyslots(device: string): Promise<number | undefined>;
  /** Crypt mappings stacked directly on `device` (a device node path). */
  holdersOf(device: string): Promise<CryptMapping[]>;
  /** The crypt mapping with this dm name, if the kernel has it. */
  byName(name: string): Promise<CryptMapping | undefined>;
  /** The crypt mapping with this device number, if it is one. */
  byMajMin(majMin: string): Promise<CryptMapping | undefined>;
}

export interface LinuxCryptsetupOptions {
  exec: Exec;
  sysfsRoot?: string;
  devRoot?: string;
  bin?: string;
  /** Bound for format/open/resize: argon2id is deliberately slow (about 2 s of CPU by default). */
  timeoutMs?: number;
}

/** dm-crypt mappings opened by cryptsetup carry a uuid `CRYPT-<TYPE>-…`. */
export const isCryptUuid = (uuid: string | undefined): boolean => !!uuid && /^CRYPT-/.test(uuid);

/** offset and size lines of `cryptsetup status` (in 512-byte sectors), as bytes. */
export function parseStatusSpan(out: string): { offset: number; size: number } | undefined {
  const sectors = (key: string) => {
    const m = new RegExp(`^\\s*${key}:\\s*(\\d+) sectors\\s*$`, 'm').exec(out);
    return m ? Number(m[1]) * 512 : undefined;
  };
  const offset = sectors('offset');
  const size = sectors('size');
  return offset !== undefined && size !== undefined ? { offset, size } : undefined;
}

export function createLinuxCryptsetup(o: LinuxCryptsetupOptions): Cryptsetup {
  const exec = o.exec;
  const sysfsRoot = o.sysfsRoot ?? '/sys';
  const devRoot = o.devRoot ?? '/dev';
  const bin = o.bin ?? 'cryptsetup';
  const timeoutMs = o.timeoutMs ?? 5 * 60_000;
  const sysBlock = path.join(sysfsRoot, 'block');

  /** Read one /sys/block/dm-N as a crypt mapping; undefined if it is not one. */
  const readDm = async (kname: string): Promise<CryptMapping | undefined> => {
    const dir = path.join(sysBlock, kname);
    const uuid = await readIfPresent(path.join(dir, 'dm', 'uuid'));
    if (!isCryptUuid(uuid)) return undefined;
    const name = await readIfPresent(path.join(dir, 'dm', 'name'));
    const majMin = await readIfPresent(path.join(dir, 'dev'));
    if (!name || !majMin) return undefined;
    const backingNames = await listOrEmpty(path.join(dir, 'slaves'));
    const backing: string[] = [];
    for (const s of backingNames) {
      const mm = await readIfPresent(path.join(dir, 'slaves', s, 'dev'));
      if (mm) backing.push(mm);
    }
    const holders = await listOrEmpty(path.join(dir, 'holders'));
    let device = path.join(devRoot, 'mapper', name);
    try {
      if (!(await fs.stat(device)).isBlockDevice()) device = path.join(devRoot, kname);
    } catch {
      device = path.join(devRoot, kname);
    }
    // A mount shows only as an open count, which sysfs does not expose; the caller checks mounts.
    return { name, device, majMin, backing, backingNames, inUse: holders.length > 0 };
  };

  const kernelName = async (device: string): Promise<string> => path.basename(await fs.realpath(device));

  const run = async (args: string[], input: string | undefined, what: string) => {
    try {
      return await exec.run(bin, args, { timeoutMs, ...(input !== undefined ? { input } : {}) });
    } catch (e) {
      // Exit codes (cryptsetup(8)): 2 = no permission (bad passphrase), 5 = device exists or busy.
      if (isCommandError(e, 'exit') && e.exitCode === 2) throw new LuksKeyRejected(what, e.stderr);
      if (isCommandError(e, 'exit') && e.exitCode === 5)
        throw new LuksBusy(`${what}: ${e.stderr || 'device busy or already exists'}`);
      throw e;
    }
  };

  const byName = async (name: string): Promise<CryptMapping | undefined> => {
    for (const k of await listOrEmpty(sysBlock)) {
      if (!k.startsWith('dm-')) continue;
      const m = await readDm(k);
      if (m?.name === name) return m;
    }
    return undefined;
  };

  return {
    async format(device, passphrase) {
      await run(
        [
          'luksFormat',
          '--batch-mode',
          '--type',
          LUKS_TYPE,
          '--cipher',
          LUKS_CIPHER,
          `--key-size=${LUKS_KEY_BITS}`,
          '--key-file=-',
          device,
        ],
        passphrase,
        device,
      );
    },

    async open(device, name, passphrase) {
      await run(['open', '--type', 'luks', '--key-file=-', device, name], passphrase, device);
      const m = await byName(name);
      if (!m) throw new Error(`cryptsetup opened ${device} as ${name} but the kernel shows no such crypt mapping`);
      return m;
    },

    async close(name) {
      if (!(await byName(name))) return;
      try {
        await run(['close', name], undefined, name);
      } catch (e) {
        // Exit 4: "Device … is not active" — closed in between, which is what we wanted.
        if (isCommandError(e, 'exit') && e.exitCode === 4 && !(await byName(name))) return;
        throw e;
      }
    },

    async resize(name, passphrase) {
      await run(['resize', ...(passphrase !== undefined ? ['--key-file=-'] : []), name], passphrase, name);
    },

    async span(name) {
      let stdout: string;
      try {
        ({ stdout } = await exec.run(bin, ['status', name], { timeoutMs: 60_000 }));
      } catch (e) {
        if (isCommandError(e, 'exit')) return undefined;
        throw e;
      }
      return parseStatusSpan(stdout);
    },

    async keyslots(device) {
      let stdout: string;
      try {
        ({ stdout } = await exec.run(bin, ['luksDump', '--dump-json-metadata', device], { timeoutMs: 60_000 }));
      } catch (e) {
        if (isCommandError(e, 'exit')) return undefined;
        throw e;
      }
      try {
        const doc = JSON.parse(stdout) as { keyslots?: Record<string, unknown> };
        return doc.keyslots && typeof doc.keyslots === 'object' ? Object.keys(doc.keyslots).length : undefined;
      } catch {
        return undefined;
      }
    },

    async holdersOf(device) {
      const kname = await kernelName(device);
      const out: CryptMapping[] = [];
      for (const h of await listOrEmpty(path.join(sysBlock, kname, 'holders'))) {
        const m = await readDm(h);
        if (m) out.push(m);
      }
      return out;
    },

    byName,

    async byMajMin(majMin) {
      const link = path.join(sysfsRoot, 'dev', 'block', majMin);
      let kname: string;
      try {
        kname = path.basename(await fs.realpath(link));
      } catch (e) {
        if (isErrno(e, 'ENOENT', 'ENOTDIR')) return undefined;
        throw e;
      }
      return kname.startsWith('dm-') ? readDm(kname) : undefined;
    },
  };
}
