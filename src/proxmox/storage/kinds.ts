// The storage kinds by pve-storage plugin type, and the checks CreateVolume makes against them.
import { InvalidArgument } from '../../errors.js';
import { FILE, SHARED_FILE_TYPES } from './file.js';
import type { DiskFormat, StorageKind } from './kind.js';
import { LVM } from './lvm.js';
import { LVMTHIN } from './lvmthin.js';
import { RBD } from './rbd.js';
import { ZFSPOOL } from './zfspool.js';

export const STORAGE_KINDS: readonly StorageKind[] = [LVMTHIN, LVM, ZFSPOOL, RBD, FILE];

const BY_TYPE = new Map(STORAGE_KINDS.flatMap((k) => k.types.map((t) => [t, k] as const)));

export const SERVED_TYPES: readonly string[] = [...BY_TYPE.keys()];

/**
 * The kind of a storage by its plugin type; a row without one (older fakes, some proxies) is
 * taken as LVM-thin, what the driver always assumed. Undefined: a type the driver does not serve.
 */
export function kindOf(plugintype: string | undefined): StorageKind | undefined {
  return plugintype === undefined || plugintype === '' ? LVMTHIN : BY_TYPE.get(plugintype);
}

/** Whether a storage is shared: storage.cfg's `shared` flag, or its type (RBD, NFS, CIFS). */
export function isSharedStorage(plugintype: string | undefined, sharedFlag: boolean): boolean {
  if (sharedFlag) return true;
  if (plugintype === undefined) return false;
  return !!kindOf(plugintype)?.alwaysShared || SHARED_FILE_TYPES.includes(plugintype);
}

/**
 * The kind and format a new volume gets on this storage: InvalidArgument when the driver does not
 * serve the storage's type or the storage cannot hold the requested format.
 */
export function kindForCreate(
  storage: string,
  plugintype: string | undefined,
  format: DiskFormat | undefined,
): { kind: StorageKind; format: DiskFormat } {
  const kind = kindOf(plugintype);
  if (!kind)
    throw new InvalidArgument(
      `parameter "storage": storage "${storage}" is of type ${plugintype ?? '?'}, which this driver does not serve (served: ${SERVED_TYPES.join(', ')})`,
    );
  const want: DiskFormat = format ?? kind.formats[0] ?? 'raw';
  if (!kind.formats.includes(want))
    throw new InvalidArgument(
      `parameter "storageFormat": "${want}" cannot be used on storage "${storage}" (${plugintype ?? 'lvmthin'}): ${kind.formatRule} (use ${kind.formats.join(' or ')}, or omit the key)`,
    );
  return { kind, format: want };
}
