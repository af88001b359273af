// StorageClass parameters of nfs.csi.k8s.io: the keys upstream csi-driver-nfs accepts (matched
// case-insensitively, like upstream) and the subDir templates; the per-key parsers sit beside
// their schema in ../param-keys.ts and the path rules in ../path-rules.ts.
import { InvalidArgument } from '../../errors.js';
import { NFS_PARAMETERS } from '../param-keys.js';
import { NFS_CONTEXT, type OnDelete, SUBDIR_TEMPLATES } from '../contract.js';
import { checkRelativePath, checkSegment } from '../path-rules.js';
import { reservedPath } from '../reserved.js';

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

  const server = NFS_PARAMETERS.server.parse(p.server);
  const share = NFS_PARAMETERS.share.parse(p.share);
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
  const reserved = reservedPath(share, subDir);
  if (reserved) {
    throw new InvalidArgument(
      `${reserved}; the driver keeps that name for itself and never hands it out as a claim: ` +
        'choose a share and subDir outside it (e.g. subDir ${pvc.metadata.namespace}/${pvc.metadata.name})',
    );
  }
  return {
    server,
    share,
    subDir,
    subDirFromParam: fromParam,
    mountPermissions: NFS_PARAMETERS.mountPermissions.parse(p.mountpermissions),
    onDelete: NFS_PARAMETERS.onDelete.parse(p.ondelete) ?? defaultOnDelete,
    uid: NFS_PARAMETERS.uid.parse(p.uid),
    gid: NFS_PARAMETERS.gid.parse(p.gid),
  };
}
