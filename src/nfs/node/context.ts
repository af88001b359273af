// What an NFS volume mounts, read from volume_context the way csi-driver-nfs reads it (keys
// case-insensitive; static PVs' volumeAttributes use the same keys):
//   server, share, subDir (templates ${pvc.metadata.namespace|name}, ${pv.metadata.name}
//   resolved from csi.storage.k8s.io/pvc/namespace|pvc/name|pv/name), mountOptions
//   (comma-separated, appended to the mount flags), mountPermissions (octal, chmod after mount).
// A CSI inline (ephemeral) volume in a pod spec carries the same attributes, plus
// csi.storage.k8s.io/ephemeral=true from kubelet; it names an existing folder: the node mounts it
// and never creates or removes anything on the server (as for every NFS volume here).
import { InvalidArgument } from '../../errors.js';
import { ciGet } from '../../node/common.js';
import { NFS_CONTEXT, SUBDIR_TEMPLATES } from '../contract.js';

export interface NfsVolumeSource {
  server: string;
  share: string;
  subDir: string;
  /** `server:/share/subDir` as handed to mount(8) and shown by findmnt. */
  source: string;
  mountOptions: string[];
  /** undefined: not given in the context (the driver default applies). */
  mountPermissions: number | undefined;
  /** A CSI inline volume of a pod (kubelet's csi.storage.k8s.io/ephemeral=true). */
  ephemeral: boolean;
}

function hasDotDot(p: string): boolean {
  return p.split('/').some((seg) => seg === '..');
}

/** A bare IPv6 address needs brackets in `host:path`. */
export function hostForSource(server: string): string {
  return server.includes(':') && !server.startsWith('[') ? `[${server}]` : server;
}

export function parseMountPermissions(raw: string, volumeId: string): number {
  const v = raw.trim();
  if (!/^0?[0-7]{1,4}$/.test(v)) {
    throw new InvalidArgument(
      `volume ${volumeId}: mountPermissions ${JSON.stringify(raw)} is not an octal mode such as 0777`,
    );
  }
  return parseInt(v, 8);
}

export function parseNfsContext(vc: Record<string, string> | undefined | null, volumeId: string): NfsVolumeSource {
  const server = (ciGet(vc, NFS_CONTEXT.server) ?? '').trim();
  const share = (ciGet(vc, NFS_CONTEXT.share) ?? '').trim();
  let subDir = (ciGet(vc, NFS_CONTEXT.subDir) ?? '').trim();
  if (!server)
    throw new InvalidArgument(
      `volume ${volumeId}: volume_context key "server" is required (NFS server name or address)`,
    );
  if (!share)
    throw new InvalidArgument(
      `volume ${volumeId}: volume_context key "share" is required (exported path on ${server})`,
    );
  if (/[\s,/]/.test(server))
    throw new InvalidArgument(`volume ${volumeId}: server ${JSON.stringify(server)} is not a host name or address`);
  if (hasDotDot(share))
    throw new InvalidArgument(`volume ${volumeId}: share ${JSON.stringify(share)} must not contain ".."`);

  const replacements = Object.entries(SUBDIR_TEMPLATES).map(([name, key]): [string, string | undefined] => [
    '${' + name + '}',
    ciGet(vc, key),
  ]);
  for (const [template, value] of replacements) if (value) subDir = subDir.split(template).join(value);
  const ephemeral = (ciGet(vc, NFS_CONTEXT.ephemeral) ?? '').trim().toLowerCase() === 'true';
  if (subDir.includes('${')) {
    throw new InvalidArgument(
      `volume ${volumeId}: subDir ${JSON.stringify(subDir)} has a template the volume context gives no value for` +
        (ephemeral ? ' (an inline volume has no claim: name the folder itself, e.g. subDir: media/reelsmith)' : ''),
    );
  }
  subDir = subDir.replace(/^\/+|\/+$/g, '');
  if (hasDotDot(subDir))
    throw new InvalidArgument(`volume ${volumeId}: subDir ${JSON.stringify(subDir)} must not contain ".."`);

  const base = share.replace(/\/+$/, '');
  const path = subDir ? `${base}/${subDir}` : base || '/';
  const source = `${hostForSource(server)}:${path}`;

  const mountOptions = (ciGet(vc, NFS_CONTEXT.mountOptions) ?? '')
    .split(',')
    .map((o) => o.trim())
    .filter(Boolean);
  const permRaw = ciGet(vc, NFS_CONTEXT.mountPermissions);
  const mountPermissions =
    permRaw !== undefined && permRaw.trim() !== '' ? parseMountPermissions(permRaw, volumeId) : undefined;

  return { server, share, subDir, source, mountOptions, mountPermissions, ephemeral };
}

/** Compare NFS sources the way the kernel records them, ignoring duplicate and trailing slashes. */
export function sameNfsSource(a: string, b: string): boolean {
  const norm = (s: string) => {
    const i = s.lastIndexOf(':/');
    if (i < 0) return s;
    const p = s
      .slice(i + 1)
      .replace(/\/+/g, '/')
      .replace(/(.)\/$/, '$1');
    return `${s.slice(0, i)}:${p}`;
  };
  return norm(a) === norm(b);
}
