// Parameters of the VM config update calls: which option keys exist, which privilege each needs,
// and the checks update_vm_api runs before it touches the config.

import type { Perms } from '../http/auth.js';
import { fail, paramError } from '../http/errors.js';
import { splitList } from '../http/params.js';
import {
  DRIVE_BUSES,
  DriveFormatError,
  isDriveKey,
  isNewDiskSpec,
  parseDrive,
  parseNewDiskSpec,
  parseVolid,
} from '../model/drive.js';
import type { UpdateRequest } from '../ops/vm-update.js';
import { checkVolumeAccess } from './storage.js';

// The option groups of qemu-server 9's PVE/API2/Qemu.pm ($cpuoptions, $memoryoptions,
// $hwtypeoptions, $generaloptions, $diskoptions) for the keys the simulator knows, with the
// privilege $check_vm_modify_config_perm asks for each. A known key in none of them (vmgenid,
// meta) is root-only there.
const OPTION_PRIV: Record<string, string | undefined> = {
  name: 'VM.Config.Options',
  description: 'VM.Config.Options',
  onboot: 'VM.Config.Options',
  ostype: 'VM.Config.Options',
  protection: 'VM.Config.Options',
  agent: 'VM.Config.Options',
  startup: 'VM.Config.Options',
  boot: 'VM.Config.Disk',
  bootdisk: 'VM.Config.Disk',
  scsihw: 'VM.Config.HWType',
  hotplug: 'VM.Config.HWType',
  smbios1: 'VM.Config.HWType',
  vga: 'VM.Config.HWType',
  machine: 'VM.Config.HWType',
  cores: 'VM.Config.CPU',
  sockets: 'VM.Config.CPU',
  cpu: 'VM.Config.CPU',
  vcpus: 'VM.Config.CPU',
  memory: 'VM.Config.Memory',
  balloon: 'VM.Config.Memory',
  shares: 'VM.Config.Memory',
  vmgenid: undefined,
  meta: undefined,
};

const OPTION_CHECK: Record<string, (v: string) => string | undefined> = {
  name: (v) =>
    /^(?=.{1,63}$)[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9-]+)*$/.test(v)
      ? undefined
      : 'value does not look like a valid DNS name',
  cores: (v) => (/^\d+$/.test(v) && Number(v) >= 1 ? undefined : `type check ('integer') failed - got '${v}'`),
  sockets: (v) => (/^\d+$/.test(v) && Number(v) >= 1 ? undefined : `type check ('integer') failed - got '${v}'`),
  onboot: (v) => (/^(0|1)$/.test(v) ? undefined : `type check ('boolean') failed - got '${v}'`),
  protection: (v) => (/^(0|1)$/.test(v) ? undefined : `type check ('boolean') failed - got '${v}'`),
  scsihw: (v) =>
    ['lsi', 'lsi53c810', 'virtio-scsi-pci', 'virtio-scsi-single', 'megasas', 'pvscsi'].includes(v)
      ? undefined
      : `value '${v}' does not have a value in the enumeration 'lsi, lsi53c810, virtio-scsi-pci, virtio-scsi-single, megasas, pvscsi'`,
};

/** PVE::QemuServer::Drive::valid_drive_names, in its order (it shows up in enum errors). */
export const ALL_DRIVE_NAMES = [
  ...(['ide', 'scsi', 'virtio', 'sata'] as const).flatMap((bus) =>
    Array.from({ length: DRIVE_BUSES[bus] }, (_, i) => `${bus}${i}`),
  ),
  'efidisk0',
  'tpmstate0',
];

/** Known VM option? (PVE::QemuServer::option_exists) */
export function optionExists(key: string): boolean {
  return isDriveKey(key) || key in OPTION_PRIV || /^(net\d+|unused\d+|tags)$/.test(key);
}

/** `extra` validator for the config schemas: VM options are the open-ended part. */
export function checkOption(key: string, value: string): string | undefined {
  if (!optionExists(key))
    return 'property is not defined in schema and the schema does not allow additional properties';
  if (isDriveKey(key)) {
    try {
      parseDrive(key, value);
      return undefined;
    } catch (e) {
      if (e instanceof DriveFormatError) return e.message;
      throw e;
    }
  }
  return OPTION_CHECK[key]?.(value);
}

const UPDATE_META = new Set(['node', 'vmid', 'delete', 'revert', 'force', 'digest', 'skiplock', 'background_delay']);

/** Splits validated parameters into an UpdateRequest, with update_vm_api's early parameter errors. */
export function buildUpdateRequest(params: Record<string, string>): UpdateRequest {
  if (params.skiplock === '1') throw paramError({ skiplock: 'Only root may use this option.' });
  const set = new Map<string, string>();
  for (const [k, v] of Object.entries(params)) if (!UPDATE_META.has(k)) set.set(k, v);
  if (!params.delete && !params.revert && set.size === 0) throw fail('no options specified');
  const revert: string[] = [];
  for (const opt of splitList(params.revert ?? '')) {
    if (!optionExists(opt)) throw paramError({ revert: `unknown option '${opt}'` });
    if (set.has(opt)) throw paramError({ delete: `you can't use '-${opt}' and -revert ${opt}' at the same time` });
    revert.push(opt);
  }
  const del: string[] = [];
  for (let opt of splitList(params.delete ?? '')) {
    if (opt === 'cdrom') opt = 'ide2';
    if (set.has(opt)) throw paramError({ delete: `you can't use '-${opt}' and -delete ${opt}' at the same time` });
    if (revert.includes(opt))
      throw paramError({ revert: `you can't use '-delete ${opt}' and -revert ${opt}' at the same time` });
    if (!optionExists(opt)) throw paramError({ delete: `unknown option '${opt}'` });
    del.push(opt);
  }
  const req: UpdateRequest = { set, delete: del, revert, force: params.force === '1', skiplock: false };
  if (params.digest) req.digest = params.digest;
  return req;
}

/**
 * $check_vm_modify_config_perm: drive, unusedN, serial/usb/hostpci and tags keys are checked
 * elsewhere; an option of a group needs that group's privilege (startup also Sys.Modify on /);
 * any other key is root-only.
 */
export function checkModifyConfigPerm(perms: Perms, vmid: number, keys: Iterable<string>): void {
  for (const key of keys) {
    if (isDriveKey(key) || key === 'cdrom' || key === 'tags') continue;
    if (/^(?:unused|serial|usb|hostpci|virtiofs)\d+$/.test(key)) continue;
    const priv = OPTION_PRIV[key];
    if (/^net\d+$/.test(key)) perms.check(`/vms/${vmid}`, ['VM.Config.Network']);
    else if (priv) {
      perms.check(`/vms/${vmid}`, [priv]);
      if (key === 'startup') perms.check('/', ['Sys.Modify']);
    } else throw fail(`only root can set '${key}' config`);
  }
}

/** update_vm_api's checks: the config keys' privileges, then the drives' and volumes' access. */
export function checkUpdatePerms(perms: Perms, vmid: number, req: UpdateRequest, parse?: VolnameParse): void {
  checkModifyConfigPerm(perms, vmid, req.delete);
  checkModifyConfigPerm(perms, vmid, req.set.keys());
  // the drive keys themselves: VM.Config.Disk (the update's $check_drive_perms, and deleting unusedN)
  for (const key of [...req.delete, ...req.set.keys()])
    if (isDriveKey(key) || /^unused\d+$/.test(key)) perms.check(`/vms/${vmid}`, ['VM.Config.Disk']);
  checkStorageAccess(perms, vmid, req.set, parse);
}

/** The storage plugin's parse_volname for a volume a config names (check_volume_access runs it first). */
export type VolnameParse = (storage: string, volname: string) => void;

/** $check_storage_access: every volume a drive or unusedN value names, every disk it allocates. */
export function checkStorageAccess(
  perms: Perms,
  vmid: number,
  settings: Iterable<[string, string]>,
  parse?: VolnameParse,
): void {
  for (const [key, value] of settings) {
    if (/^unused\d+$/.test(key)) {
      // $check_storage_access covers unusedN values too: the VM must own the volume or the
      // caller must be allowed to use it
      const ref = parseVolid(value);
      if (!ref) throw paramError({ [key]: `not a valid volid: ${value}` });
      parse?.(ref.storage, ref.volname);
      checkVolumeAccess(perms, ref.storage, ref.volname, vmid);
      continue;
    }
    if (!isDriveKey(key)) continue;
    const d = parseDrive(key, value);
    if (isNewDiskSpec(d.file)) {
      const storage = parseNewDiskSpec(d.file).storage;
      if (!storage) throw fail('no storage ID specified (and no default storage)');
      perms.check(`/storage/${storage}`, ['Datastore.AllocateSpace']);
    } else {
      const ref = parseVolid(d.file);
      if (ref) {
        parse?.(ref.storage, ref.volname);
        checkVolumeAccess(perms, ref.storage, ref.volname, vmid);
      }
    }
  }
}
