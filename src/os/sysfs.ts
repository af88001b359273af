// Reading sysfs (and /sys/block, /sys/class/scsi_disk): a device can go away between listing a
// directory and reading an attribute in it, so "not there" is an answer, not an error.
//
// Read synchronously, on purpose: sysfs answers from the kernel's own structures (an attribute
// read never waits for a disk or a server), and a few µs of read cost far less than the
// thread-pool round trips of fs.promises (readFile is open, fstat, read, read, close: five hops,
// each a wake-up of a pool thread and then of the event loop — on a busy node each wake-up waits
// for a CPU). A node call reads a few dozen of these. Writes (rescan, scan) stay asynchronous:
// they make the kernel talk to the device.
import fs from 'node:fs';
import { isErrno } from './paths.js';

/** An attribute's trimmed text; undefined when it is gone (`codes`: the errnos that mean so). */
function readTrimmed(file: string, codes: readonly string[]): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch (e) {
    if (isErrno(e, ...codes)) return undefined;
    throw e;
  }
}

/** An attribute's trimmed text; undefined when the file or a directory on its way is not there. */
export function readIfPresent(file: string): Promise<string | undefined> {
  return Promise.resolve().then(() => readTrimmed(file, ['ENOENT', 'ENOTDIR']));
}

/**
 * An attribute's trimmed text; '' also when it cannot be read now: a device removed meanwhile
 * (EIO, ENXIO) or an attribute without a value for this device (EINVAL).
 */
export function readOrEmpty(file: string): Promise<string> {
  return Promise.resolve().then(() => readTrimmed(file, ['ENOENT', 'ENOTDIR', 'EINVAL', 'EIO', 'ENXIO']) ?? '');
}

/** A directory's names; [] when it is not there. */
export function listOrEmpty(dir: string): Promise<string[]> {
  return Promise.resolve().then(() => {
    try {
      return fs.readdirSync(dir);
    } catch (e) {
      if (isErrno(e, 'ENOENT', 'ENOTDIR')) return [];
      throw e;
    }
  });
}
