// The nfs.csi.k8s.io snapshot handles this driver reads:
//   ours:      nfs-snapshot/1#server#share#name      the copy in <share>/snapshots/<name>/
//   upstream:  server#baseDir#name#name#src           csi-driver-nfs: <baseDir>/<name>/<src>.tar.gz (or .tar)
// Ours starts with a field holding a '/', which no server name has, so neither form (nor a
// volume handle) is ever read as another.
import { reservedPath } from './reserved.js';

const OURS = 'nfs-snapshot/1';

export interface SnapshotRef {
  kind: 'ours';
  server: string;
  /** Absolute server path of the share. */
  share: string;
  /** The CSI snapshot name. */
  name: string;
}

export interface UpstreamSnapshotRef {
  kind: 'upstream';
  server: string;
  share: string;
  /** The directory below the share holding the archive (the snapshot's name). */
  dir: string;
  /** The archive's base name: the source volume's uuid or subDir. */
  src: string;
}

const trim = (s: string) => s.replace(/^\/+|\/+$/g, '');
const safeName = (s: string) => s !== '' && s !== '.' && s !== '..' && !/[/\0]/.test(s);
const safePath = (s: string) => s === '' || s.split('/').every(safeName);

export function composeSnapshotId(r: Omit<SnapshotRef, 'kind'>): string {
  return [OURS, r.server, trim(r.share), r.name].join('#');
}

/** null when the handle is neither form (DeleteSnapshot then has nothing to do). */
export function parseSnapshotId(id: string): SnapshotRef | UpstreamSnapshotRef | null {
  const p = id.split('#');
  if (p[0] === OURS) {
    if (p.length !== 4) return null;
    const [, server = '', share = '', name = ''] = p;
    if (!server || /[\s/]/.test(server) || !safePath(trim(share)) || name === '' || name.includes('\0')) return null;
    // A share inside a snapshot store holds no snapshot store of its own the driver made.
    if (reservedPath(share, '')) return null;
    return { kind: 'ours', server, share: '/' + trim(share), name };
  }
  if (p.length !== 5) return null;
  const [server = '', base = '', uuid = '', dir = '', src = ''] = p;
  if (!server || /[\s/]/.test(server) || !safePath(trim(base))) return null;
  if (!safeName(uuid) || dir !== uuid || !safeName(src)) return null;
  // csi-driver-nfs keeps its archives in claim-like folders, never in this driver's own.
  if (reservedPath(base, dir)) return null;
  return { kind: 'upstream', server, share: '/' + trim(base), dir, src };
}
