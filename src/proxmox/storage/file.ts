// File storages (Plugin.pm, DirPlugin.pm, NFSPlugin.pm, CIFSPlugin.pm): image files
// `images/<vmid>/vm-<vmid>-<name>.<raw|qcow2>` (volume name `<vmid>/<file>`; the allocation's
// filename carries the extension, which must agree with `format`); status() is the file
// system's df; free_image unlinks the file and does not look whether a VM holds it open (the
// ownership gate does). NFS and CIFS are shared by their type, a directory when storage.cfg
// says so.
import type { StorageKind } from './kind.js';

export const FILE: StorageKind = {
  name: 'file (directory, NFS, CIFS)',
  types: ['dir', 'nfs', 'cifs'],
  formats: ['raw', 'qcow2'],
  formatRule: 'a file storage holds raw or qcow2 images',
  fileBased: true,
  thin: true,
  alwaysShared: false,
  inUse: 'none: the file is unlinked even while open',
  markers: false,
  snapshots: {
    supported: false,
    why: "a file storage's qcow2 snapshots are internal to the image (whole-VM snapshots); this driver does not snapshot them yet",
  },
};

/** NFS and CIFS storages are shared by their type (PVE::Storage's shared plugin list). */
export const SHARED_FILE_TYPES: readonly string[] = ['nfs', 'cifs'];
