// Reading sysfs (and /sys/block, /sys/class/scsi_disk): a device can go away between listing a
// directory and reading an attribute in it, so "not there" is an answer, not an error.
import { promises as fs } from 'node:fs';
import { isErrno } from './paths.js';

/** An attribute's trimmed text; undefined when it is gone (`codes`: the errnos that mean so). */
async function readTrimmed(file: string, codes: readonly string[]): Promise<string | undefined> {
  try {
    return (await fs.readFile(file, 'utf8')).trim();
  } catch (e) {
    if (isErrno(e, ...codes)) return undefined;
    throw e;
  }
}

/** An attribute's trimmed text; undefined when the file or a directory on its way is not there. */
export function readIfPresent(file: string): Promise<string | undefined> {
  return readTrimmed(file, ['ENOENT', 'ENOTDIR']);
}

/**
 * An attribute's trimmed text; '' also when it cannot be read now: a device removed meanwhile
 * (EIO, ENXIO) or an attribute without a value for this device (EINVAL).
 */
export async function readOrEmpty(file: string): Promise<string> {
  return (await readTrimmed(file, ['ENOENT', 'ENOTDIR', 'EINVAL', 'EIO', 'ENXIO'])) ?? '';
}

/** A directory's names; [] when it is not there. */
export async function listOrEmpty(dir: string): Promise<string[]> {
  try {
    return await fs.readdir(dir);
  } catch (e) {
    if (isErrno(e, 'ENOENT', 'ENOTDIR')) return [];
    throw e;
  }
}
