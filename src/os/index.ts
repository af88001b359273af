// OS adapters (ports + Linux implementations) used by the node plugin.
export { createExec, CommandError, isCommandError, type Exec, type ExecOptions, type ExecResult } from './exec.js';
export { createLinuxMounter, type Mounter, type MountEntry, type PathState } from './mounter.js';
export { createLinuxBlockDevices, type BlockDevices, type FsType } from './blockdevices.js';
export { createLinuxCryptsetup, type Cryptsetup, type CryptMapping, LuksKeyRejected, LuksBusy } from './cryptsetup.js';
export { createStatFs, type StatFs, type FsUsage } from './statfs.js';
export { normalizeWwn, wwnOfWwid, type DriverDisks } from './scsi.js';
