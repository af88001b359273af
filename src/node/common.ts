// Small pieces shared by the Proxmox and NFS node backends: capability reading,
// case-insensitive context lookup, and error translation.
import { CsiError, DeadlineExceeded, FailedPrecondition, Internal, InvalidArgument, isCsiError } from '../errors.js';
import type { VolumeCapability } from '../csi/types.js';
import { isCommandError } from '../os/exec.js';
import { promises as fs } from 'node:fs';
import type { MountEntry } from '../os/mounter.js';
import { ensureDir, ensureFile, isErrno } from '../os/paths.js';
import { accessModeName } from '../csi/access-modes.js';

export type AccessType = 'mount' | 'block';

export function accessTypeOf(cap: VolumeCapability | null | undefined, rpc: string): AccessType {
  if (!cap) throw new InvalidArgument(`${rpc}: volume_capability is required`);
  if (cap.block) return 'block';
  if (cap.mount) return 'mount';
  throw new InvalidArgument(`${rpc}: volume_capability must set access_type (mount or block)`);
}

/** Access mode name whether the loader decoded enums as strings or numbers. */
export function accessModeOf(cap: VolumeCapability | null | undefined): string {
  return accessModeName(cap?.accessMode?.mode);
}

export function isReaderOnlyMode(cap: VolumeCapability | null | undefined): boolean {
  const m = accessModeOf(cap);
  return m === 'SINGLE_NODE_READER_ONLY' || m === 'MULTI_NODE_READER_ONLY';
}

export function mountFlagsOf(cap: VolumeCapability | null | undefined): string[] {
  return (cap?.mount?.mountFlags ?? []).map((f) => f.trim()).filter(Boolean);
}

/** Look a key up ignoring case, as csi-driver-nfs does for volume context and StorageClass keys. */
export function ciGet(map: Record<string, string> | undefined | null, key: string): string | undefined {
  if (!map) return undefined;
  if (key in map) return map[key];
  const want = key.toLowerCase();
  for (const [k, v] of Object.entries(map)) if (k.toLowerCase() === want) return v;
  return undefined;
}

/** Remove duplicates, keeping the first occurrence (order matters to mount: later wins). */
export function uniq(list: readonly string[]): string[] {
  return [...new Set(list)];
}

/**
 * Turn anything thrown below into a typed error for the server: typed errors pass through, a
 * killed command becomes DeadlineExceeded, other command failures become Internal with the
 * command's own words. `what` says what we were doing, for the person reading the event.
 */
export function asCsiError(e: unknown, what: string): CsiError {
  if (isCsiError(e)) return e;
  if (isCommandError(e, 'timeout')) return new DeadlineExceeded(`${what}: ${e.message}`, { cause: e });
  if (isCommandError(e, 'aborted')) return new DeadlineExceeded(`${what}: ${e.message}`, { cause: e });
  const msg = e instanceof Error ? e.message : String(e);
  return new Internal(`${what}: ${msg}`, { cause: e });
}

/**
 * Remove a publish target after its mount is gone — only what the driver itself makes there: an
 * empty directory, or (block access, `allowEmptyFile`) the empty file a device node was bound
 * onto. A file holding data, a non-empty directory, a device node, a planted symlink: refused
 * and left as they are. Returns false when nothing was there.
 */
export async function removePublishTarget(
  target: string,
  volumeId: string,
  opts: { allowEmptyFile: boolean },
): Promise<boolean> {
  let st;
  try {
    st = await fs.lstat(target);
  } catch (e) {
    if (isErrno(e, 'ENOENT')) return false;
    throw e;
  }
  const refuse = (what: string) =>
    new FailedPrecondition(
      `volume ${volumeId}: target ${target} is not mounted but ${what}; this plugin did not create that and will not delete it`,
    );
  if (st.isSymbolicLink()) throw symlinkRefused(target, volumeId);
  if (st.isDirectory()) {
    try {
      await fs.rmdir(target);
    } catch (e) {
      if (isErrno(e, 'ENOTEMPTY', 'EEXIST')) throw refuse('is a directory that still holds files');
      throw e;
    }
    return true;
  }
  if (st.isFile()) {
    if (st.size > 0) throw refuse(`is a file holding ${st.size} bytes of data`);
    if (!opts.allowEmptyFile) throw refuse('is a file (this driver publishes directories only)');
    await fs.unlink(target);
    return true;
  }
  throw refuse('is neither a directory nor a regular file');
}

function symlinkRefused(target: string, volumeId: string): CsiError {
  return new InvalidArgument(
    `volume ${volumeId}: ${target} is a symbolic link; node paths must be real directories or files inside the kubelet directory`,
  );
}

/** Refuse a symlink as the last component of a path the driver is about to create or mount on. */
async function refuseSymlink(p: string, volumeId: string): Promise<void> {
  try {
    if ((await fs.lstat(p)).isSymbolicLink()) throw symlinkRefused(p, volumeId);
  } catch (e) {
    if (!isErrno(e, 'ENOENT')) throw e;
  }
}

/** mkdir -p for a mount point, refusing a symlink there (mount(8) would follow it). */
export async function prepareTargetDir(p: string, volumeId: string): Promise<void> {
  await refuseSymlink(p, volumeId);
  await ensureDir(p);
}

/** The empty file a block device node is bound onto, refusing a symlink there. */
export async function prepareTargetFile(p: string, volumeId: string): Promise<void> {
  await refuseSymlink(p, volumeId);
  await ensureFile(p);
}

/** The answer when the mount at a node path is not this volume's: nothing was touched. */
export function foreignMount(volumeId: string, p: string, entry: MountEntry, why: string): CsiError {
  return new FailedPrecondition(
    `volume ${volumeId}: ${p} has ${entry.source || '?'} (${entry.fstype}) mounted, which is not this volume's (${why}); ` +
      'left mounted and untouched — unmount it by hand if it is stale',
  );
}
