// The storage plugins other than LVM-thin (that one is storage.ts, unchanged): what
// PVE::Storage::vdisk_alloc / vdisk_free / volume_resize do on thick LVM (LVMPlugin.pm), a ZFS
// pool (ZFSPoolPlugin.pm), Ceph RBD (RBDPlugin.pm) and file storages (Plugin.pm, DirPlugin.pm,
// NFSPlugin.pm, CIFSPlugin.pm): the volume names each accepts, the formats, the size rounding,
// the space each takes, and the error texts each passes through.
import { fail } from '../http/errors.js';
import { roundUpToExtent } from '../model/sizes.js';
import { FILE_TYPES, FORMATS } from '../model/storage-types.js';
import type { StorageModel, VolumeModel } from '../model/types.js';

const KIB = 1024;
const MIB = 1024 * KIB;
/** ZFSPoolPlugin's default volblocksize (16k since PVE 8): a zvol's size is a multiple of it. */
const ZVOL_BLOCK = 16 * KIB;

/** Plugin.pm parse_name_dir: `vm-<vmid>-<name>.<raw|qcow2|vmdk>`. */
/** The characters PVE::Storage::Plugin::parse_lvm_name lets an LVM volume name have. */
const LVM_NAME_RE = /^[a-z0-9][a-z0-9\-_.]*[a-z0-9]$/i;
const FILE_NAME_RE = /^((vm-|base-)(\d+)-[^/\s]+\.(raw|qcow2|vmdk))$/;

/** The volume's real size for a requested one, as each plugin rounds it. */
export function roundSize(st: StorageModel, bytes: number): number {
  switch (st.type) {
    case 'lvmthin':
    case 'lvm':
      return roundUpToExtent(bytes);
    case 'zfspool':
      return Math.ceil(bytes / ZVOL_BLOCK) * ZVOL_BLOCK;
    case 'rbd':
      // RBDPlugin: `rbd create --size` in MiB of (size in KiB + 1023) / 1024
      return Math.ceil(bytes / MIB) * MIB;
    case 'dir':
    case 'nfs':
    case 'cifs':
      // qemu-img create takes the size in KiB
      return Math.ceil(bytes / KIB) * KIB;
  }
}

/** Space a volume takes from the storage at allocation (thick LVM, non-sparse zvols). */
export function reservedBytes(st: StorageModel, vol: VolumeModel): number {
  return st.type === 'lvm' || st.type === 'zfspool' ? vol.sizeBytes : 0;
}

/** Each plugin's parse_volname, with its error text; returns the format the name says. */
export function parseVolname(st: StorageModel, volname: string): 'raw' | 'qcow2' {
  if (FILE_TYPES.has(st.type)) {
    const m = /^(\d+)\/(.+)$/.exec(volname);
    const file = m?.[2] ?? '';
    const fm = FILE_NAME_RE.exec(file);
    if (!m || !fm) throw fail(`unable to parse directory volume name '${volname}'`);
    if (fm[4] === 'vmdk') throw fail(`unable to parse directory volume name '${volname}'`);
    return fm[4] as 'raw' | 'qcow2';
  }
  // PVE::Storage::Plugin::parse_lvm_name: the LVM plugins refuse any other character first
  if ((st.type === 'lvm' || st.type === 'lvmthin') && !LVM_NAME_RE.test(volname))
    throw fail(`lvm name '${volname}' contains illegal characters`);
  const ok =
    st.type === 'zfspool'
      ? /^(?:(?:base|basevol)-\d+-\S+\/)?(?:base|basevol|vm|subvol)-\d+-\S+$/.test(volname)
      : st.type === 'rbd'
        ? /^(?:base-\d+-\S+\/)?(?:base)?(?:vm)?-\d+-\S+$/.test(volname)
        : /^vm-\d+-\S+$/.test(volname);
  const what = st.type === 'zfspool' ? 'zfs' : st.type === 'rbd' ? 'rbd' : 'lvm';
  if (!ok) throw fail(`unable to parse ${what} volume name '${volname}'`);
  return 'raw';
}

/** Where the volume lives, as GET …/content/{volume} reports its `path`. */
export function volumePath(st: StorageModel, volname: string): string {
  switch (st.type) {
    case 'zfspool':
      return `/dev/zvol/${st.vgname}/${volname}`;
    case 'rbd':
      return `/dev/rbd-pve/${st.id}/${st.vgname}/${volname}`;
    case 'lvm':
    case 'lvmthin':
      return `/dev/${st.vgname}/${volname}`;
    case 'dir':
    case 'nfs':
    case 'cifs':
      return `${st.vgname}/images/${volname}`;
  }
}

function freeName(st: StorageModel, vmid: number, fmt: string): string {
  for (let i = 0; ; i++) {
    const name = FILE_TYPES.has(st.type) ? `${vmid}/vm-${vmid}-disk-${i}.${fmt}` : `vm-${vmid}-disk-${i}`;
    if (!st.volumes.has(name)) return name;
  }
}

/**
 * alloc_image of a non-LVM-thin plugin: the volume name it stores (checked, free), or the error
 * the plugin dies with. `free` is the storage's free bytes before this allocation.
 */
export function allocName(
  st: StorageModel,
  vmid: number,
  name: string | undefined,
  fmt: string,
  sizeBytes: number,
  free: number,
): string {
  const formats = FORMATS[st.type];
  if (!formats.includes(fmt)) {
    if (st.type === 'lvm' && fmt === 'qcow2')
      throw fail('snapshot-as-volume-chain option need to be enabled to use qcow2 format');
    throw fail(`unsupported format '${fmt}'`);
  }
  if (FILE_TYPES.has(st.type)) return allocFileName(st, vmid, name, fmt);
  if ((st.type === 'zfspool' || st.type === 'rbd') && name && !name.startsWith(`vm-${vmid}-`))
    throw fail(`illegal name '${name}' - should be 'vm-${vmid}-*'`);
  const volname = name || freeName(st, vmid, fmt);
  parseVolname(st, volname);
  if (st.volumes.has(volname)) {
    if (st.type === 'zfspool') throw fail(`zfs error: cannot create '${st.vgname}/${volname}': dataset already exists`);
    if (st.type === 'rbd') throw fail(`rbd create '${volname}' error: rbd: create error: (17) File exists`);
    throw fail(
      `lvcreate '${st.vgname}/${volname}' error:   Logical Volume "${volname}" already exists in volume group "${st.vgname}"`,
    );
  }
  if (st.type === 'lvm' && sizeBytes > free)
    throw fail(`not enough free space (${Math.floor(free / KIB)} < ${Math.ceil(sizeBytes / KIB)})`);
  if (st.type === 'zfspool' && sizeBytes > free)
    throw fail(`zfs error: cannot create '${st.vgname}/${volname}': out of space`);
  return volname;
}

function allocFileName(st: StorageModel, vmid: number, name: string | undefined, fmt: string): string {
  const file = name || freeName(st, vmid, fmt).replace(/^\d+\//, '');
  const m = FILE_NAME_RE.exec(file);
  if (!m) throw fail(`unable to parse volume filename '${file}'`);
  if (m[4] !== fmt) throw fail(`illegal name '${file}' - wrong extension for format ('${m[4]} != '${fmt}')`);
  const volname = `${vmid}/${file}`;
  if (st.volumes.has(volname)) throw fail(`disk image '${st.vgname}/images/${volname}' already exists`);
  return volname;
}

/**
 * vdisk_free's refusal while a running VM holds the volume, as each plugin words it; a file
 * storage unlinks the file regardless (Plugin.pm free_image), so it has none.
 */
export function inUseError(st: StorageModel, volname: string): Error | undefined {
  switch (st.type) {
    case 'zfspool':
      return fail(`zfs error: cannot destroy '${st.vgname}/${volname}': dataset is busy`);
    case 'rbd':
      return fail(`rbd rm '${volname}' error: rbd: error: image still has watchers`);
    case 'lvm':
    case 'lvmthin':
      return fail(`lvremove '${st.vgname}/${volname}' error:   Logical volume ${st.vgname}/${volname} in use.`);
    case 'dir':
    case 'nfs':
    case 'cifs':
      return undefined;
  }
}
