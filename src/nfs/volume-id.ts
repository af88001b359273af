// The nfs.csi.k8s.io volume handle, as upstream csi-driver-nfs composes it:
//   server#share#subDir#uuid#onDelete
// share and subDir without surrounding slashes; uuid is the PV name when the StorageClass set
// subDir (several PVs may share a subDir template) and empty otherwise; the 5th field only
// records "retain" or "archive" (empty means the driver default, delete). Handles of older
// releases, "server/share/subDir", still parse.

/** What DeleteVolume does with the directory; the 5th field of the volume handle records it. */
export type OnDelete = 'delete' | 'retain' | 'archive';
export const ON_DELETE: readonly OnDelete[] = ['delete', 'retain', 'archive'];

export interface VolumeRef {
  server: string;
  /** Absolute server path ("/" + the handle's share field). */
  share: string;
  /** Relative to the share; validated (no empty, "." or ".." segments). */
  subDir: string;
  uuid: string;
  /** undefined: the handle does not say; use the driver default. */
  onDelete?: OnDelete | undefined;
}

const trimSlashes = (s: string) => s.replace(/^\/+|\/+$/g, '');

export function composeVolumeId(v: {
  server: string;
  share: string;
  subDir: string;
  uuid: string;
  onDelete: OnDelete;
}): string {
  const policy = v.onDelete === 'retain' || v.onDelete === 'archive' ? v.onDelete : '';
  return [trimSlashes(v.server), trimSlashes(v.share), trimSlashes(v.subDir), v.uuid, policy].join('#');
}

function safeRelative(p: string): boolean {
  if (p === '') return false;
  return p.split('/').every((s) => s !== '' && s !== '.' && s !== '..' && !s.includes('\0'));
}

/** null when `id` is not a handle this driver can act on; callers treat that as "no such volume". */
export function parseVolumeId(id: string): VolumeRef | null {
  let server: string;
  let share: string;
  let subDir: string;
  let uuid = '';
  let onDelete: OnDelete | undefined;
  const parts = id.split('#');
  if (parts.length >= 3) {
    [server, share, subDir] = parts as [string, string, string];
    uuid = parts[3] ?? '';
    const policy = (parts[4] ?? '').toLowerCase();
    if (policy !== '') {
      // An unknown policy is not guessed at: deleting data on a misread handle is not undoable.
      if (!ON_DELETE.includes(policy as OnDelete)) return null;
      onDelete = policy as OnDelete;
    }
  } else {
    const m = /^([^/]+)\/(.*)\/([^/]+)$/.exec(id);
    if (!m) return null;
    [, server, share, subDir] = m as unknown as [string, string, string, string];
  }
  server = server.trim();
  share = trimSlashes(share);
  subDir = trimSlashes(subDir);
  if (!server || /[\s/]/.test(server)) return null;
  if (share !== '' && !safeRelative(share)) return null;
  if (!safeRelative(subDir)) return null;
  return { server, share: '/' + share, subDir, uuid, onDelete };
}
