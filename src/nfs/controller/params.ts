// StorageClass parameters of nfs.csi.k8s.io: the keys upstream csi-driver-nfs accepts (matched
// case-insensitively, like upstream), the subDir templates, and path validation.
import { InvalidArgument } from '../../errors.js';
import { hasControlCharacter } from '../../control-characters.js';
import { NFS_PARAMETERS } from '../param-keys.js';
import { NFS_CONTEXT, ON_DELETE, type OnDelete, SUBDIR_TEMPLATES } from '../contract.js';

const PVC_NAMESPACE_KEY = NFS_CONTEXT.pvcNamespace;
const PVC_NAME_KEY = NFS_CONTEXT.pvcName;
const PV_NAME_KEY = NFS_CONTEXT.pvName;

/** Lower-cased key → how it is spelled in messages. The provisioner adds the last three. */
const KEYS: Record<string, string> = {
  ...Object.fromEntries(Object.keys(NFS_PARAMETERS).map((k) => [k.toLowerCase(), k])),
  [PVC_NAMESPACE_KEY]: PVC_NAMESPACE_KEY,
  [PVC_NAME_KEY]: PVC_NAME_KEY,
  [PV_NAME_KEY]: PV_NAME_KEY,
};

const TEMPLATES: Record<string, string> = SUBDIR_TEMPLATES;

export interface VolumeParams {
  server: string;
  /** Absolute server path, normalised: "/volume1/k8s-volumes/talos" ("/" for the root). */
  share: string;
  /** Directory of the volume relative to the share; never empty. */
  subDir: string;
  /** True when subDir came from the StorageClass (then the handle carries the PV name as uuid). */
  subDirFromParam: boolean;
  /** Mode applied to the volume directory; undefined = leave as created (0755). */
  mountPermissions?: number | undefined;
  onDelete: OnDelete;
  uid?: number | undefined;
  gid?: number | undefined;
}

const MAX_NAME_BYTES = 255;

/** Checks one path component; `what` names the parameter in the message. */
export function checkSegment(seg: string, what: string, full: string): void {
  if (seg === '')
    throw new InvalidArgument(`${what} "${full}" has an empty path segment (leading, trailing or double "/")`);
  if (seg === '.' || seg === '..') throw new InvalidArgument(`${what} "${full}" must not contain "${seg}" segments`);
  if (Buffer.byteLength(seg, 'utf8') > MAX_NAME_BYTES) {
    throw new InvalidArgument(
      `${what} "${full}": segment "${seg.slice(0, 40)}…" is longer than ${MAX_NAME_BYTES} bytes`,
    );
  }
  // '#' separates the fields of the volume handle; control characters have no place in a path.
  if (seg.includes('#') || hasControlCharacter(seg))
    throw new InvalidArgument(`${what} "${full}" must not contain "#" or control characters`);
}

/** A relative path below the share: no leading "/", no empty, "." or ".." segments. */
export function checkRelativePath(p: string, what: string): string {
  if (p.startsWith('/')) throw new InvalidArgument(`${what} "${p}" must be relative to the share, not absolute`);
  for (const seg of p.split('/')) checkSegment(seg, what, p);
  return p;
}

/** The share as an absolute path; surrounding slashes are optional in the parameter. */
export function normaliseShare(share: string): string {
  const trimmed = share.replace(/^\/+|\/+$/g, '');
  if (trimmed === '') return '/';
  for (const seg of trimmed.split('/')) checkSegment(seg, 'share', share);
  return '/' + trimmed;
}

export function checkServer(server: string): string {
  if (!server) throw new InvalidArgument('parameter "server" is required: the NFS server\'s host name or IP address');
  if (server.length > 253 || /[\s/#]/.test(server) || hasControlCharacter(server)) {
    throw new InvalidArgument(`parameter "server" value "${server}" is not a host name or IP address`);
  }
  return server;
}

function parseOnDelete(v: string | undefined, fallback: OnDelete): OnDelete {
  if (v === undefined || v === '') return fallback;
  const lower = v.toLowerCase() as OnDelete;
  if (!ON_DELETE.includes(lower)) {
    throw new InvalidArgument(`parameter "onDelete" value "${v}" is not one of ${ON_DELETE.join(', ')}`);
  }
  return lower;
}

/** Replaces ${pvc.metadata.namespace}, ${pvc.metadata.name} and ${pv.metadata.name}. */
export function expandSubDir(template: string, values: Record<string, string | undefined>): string {
  return template.replace(/\$\{([^}]*)\}/g, (_m, name: string) => {
    const key = TEMPLATES[name.trim()];
    if (!key) {
      throw new InvalidArgument(
        `subDir "${template}" uses unknown template \${${name}}; supported: ${Object.keys(TEMPLATES)
          .map((t) => `\${${t}}`)
          .join(', ')}`,
      );
    }
    const v = values[key];
    if (!v) {
      throw new InvalidArgument(
        `subDir "${template}" uses \${${name}} but the request has no "${key}" parameter; ` +
          'run csi-provisioner with --extra-create-metadata',
      );
    }
    return v;
  });
}

/** Validates and interprets CreateVolume parameters; `name` is the CSI volume (PV) name. */
export function parseCreateParams(
  name: string,
  params: Record<string, string>,
  defaultOnDelete: OnDelete,
): VolumeParams {
  const p: Record<string, string> = {};
  for (const [key, value] of Object.entries(params)) {
    const lower = key.toLowerCase();
    if (!(lower in KEYS)) {
      const allowed = Object.keys(NFS_PARAMETERS).join(', ');
      throw new InvalidArgument(`unknown parameter "${key}" in the StorageClass; nfs.csi.k8s.io accepts ${allowed}`);
    }
    if (lower in p && p[lower] !== value) {
      throw new InvalidArgument(
        `parameter "${KEYS[lower]}" is given twice with different values (keys are case-insensitive)`,
      );
    }
    p[lower] = value;
  }

  const server = checkServer(p.server ?? '');
  const share = normaliseShare(p.share ?? '');
  let subDir: string;
  const subdirParam = p.subdir;
  const fromParam = !!subdirParam;
  if (subdirParam) {
    subDir = checkRelativePath(expandSubDir(subdirParam, p), 'subDir');
  } else {
    if (!name) throw new InvalidArgument('volume name is required');
    checkSegment(name, 'volume name', name);
    if (name.includes('/')) throw new InvalidArgument(`volume name "${name}" must not contain "/"`);
    subDir = name;
  }
  return {
    server,
    share,
    subDir,
    subDirFromParam: fromParam,
    mountPermissions: NFS_PARAMETERS.mountPermissions.parse(p.mountpermissions),
    onDelete: parseOnDelete(p.ondelete, defaultOnDelete),
    uid: NFS_PARAMETERS.uid.parse(p.uid),
    gid: NFS_PARAMETERS.gid.parse(p.gid),
  };
}
