// Node calls act only inside the kubelet directory (docs/design.md#node-paths). Every path a node RPC receives is
// checked here before a backend sees it: absolute, no control characters, normalised (`..`,
// `//`, trailing `/`), its parent directories resolved through symlinks, and then strictly
// below the kubelet directory (itself resolved, so a symlinked /var/lib/kubelet works). The
// last component is never stat'ed here: on a dead NFS mount that can hang. It cannot escape
// anyway — the mount table only lists real paths, and whatever creates or removes the last
// component refuses a symlink there (common.ts) — so a symlink planted inside the kubelet
// directory leads nowhere.
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { CallContext, NodeBackend } from '../csi/types.js';
import { InvalidArgument, NotFound } from '../errors.js';
import { isErrno } from '../os/paths.js';
import { hasControlCharacter } from '../control-characters.js';

export const DEFAULT_KUBELET_DIR = '/var/lib/kubelet';

/** realpath of the deepest existing ancestor, with the components below it appended as given. */
async function resolveExisting(abs: string): Promise<string> {
  const rest: string[] = [];
  let dir = abs;
  for (;;) {
    try {
      return path.join(await fs.realpath(dir), ...rest);
    } catch (e) {
      if (!isErrno(e, 'ENOENT', 'ENOTDIR')) throw e;
    }
    if (dir === '/') return path.join('/', ...rest);
    rest.unshift(path.basename(dir));
    dir = path.dirname(dir);
  }
}

export class KubeletDir {
  constructor(readonly dir: string) {
    if (!path.isAbsolute(dir)) throw new Error(`kubelet directory ${JSON.stringify(dir)} must be an absolute path`);
  }

  /** Real path of the kubelet directory now (it may be created or re-linked after start). */
  root(): Promise<string> {
    return resolveExisting(path.resolve(this.dir));
  }

  /**
   * The canonical form of `raw` (parents resolved, last component as given), or INVALID_ARGUMENT
   * naming the path and the kubelet directory when it is not strictly inside it.
   */
  async check(raw: string, field: string, rpc: string): Promise<string> {
    const shown = JSON.stringify(raw);
    if (hasControlCharacter(raw)) throw new InvalidArgument(`${rpc}: ${field} ${shown} contains control characters`);
    if (!raw.startsWith('/')) {
      throw new InvalidArgument(
        `${rpc}: ${field} ${shown} is not an absolute path; node paths must be absolute and inside the kubelet directory ${this.dir}`,
      );
    }
    const abs = path.resolve(raw);
    // Both resolutions at once: each is a thread-pool round trip, and every node call pays them.
    const rootOf = this.root();
    rootOf.catch(() => undefined); // awaited below; only the path's own error is reported first
    let canonical: string;
    try {
      canonical = abs === '/' ? '/' : path.join(await resolveExisting(path.dirname(abs)), path.basename(abs));
    } catch (e) {
      if (isErrno(e, 'ELOOP', 'ENAMETOOLONG', 'EACCES')) {
        throw new InvalidArgument(`${rpc}: ${field} ${shown} cannot be resolved: ${(e as Error).message}`);
      }
      throw e;
    }
    const root = await rootOf;
    const inside = root === '/' ? canonical !== '/' : canonical.startsWith(`${root}/`);
    if (!inside) {
      const via = canonical === raw ? '' : ` (resolves to ${canonical})`;
      throw new InvalidArgument(
        `${rpc}: ${field} ${shown}${via} is not inside the kubelet directory ${this.dir}${root === this.dir ? '' : ` (${root})`}; ` +
          'this plugin acts only on paths below it (set --kubelet-dir if kubelet keeps its state elsewhere)',
      );
    }
    return canonical;
  }

  /**
   * For the volume_path of NodeGetVolumeStats / NodeExpandVolume: a relative path is NOT_FOUND —
   * the spec's "volume not available on the specified volume_path", which is what csi-sanity
   * checks with "some/path". No volume of this plugin can be at a relative path; nothing is
   * touched either way. An absolute path outside the kubelet directory stays INVALID_ARGUMENT.
   */
  async checkVolumePath(raw: string | undefined | null, rpc: string): Promise<string> {
    if (raw && !raw.startsWith('/') && !hasControlCharacter(raw)) {
      throw new NotFound(
        `${rpc}: no volume is published at volume_path ${JSON.stringify(raw)}: it is not an absolute path (node paths are absolute and inside the kubelet directory ${this.dir})`,
      );
    }
    return this.checkOptional(raw, 'volume_path', rpc);
  }

  /** Same, for an optional field: empty stays empty (the backend decides whether it is required). */
  async checkOptional(raw: string | undefined | null, field: string, rpc: string): Promise<string> {
    return raw ? this.check(raw, field, rpc) : (raw ?? '');
  }
}

/** The path fields of node requests, and their names on the wire (for messages). */
const PATH_FIELDS = {
  targetPath: 'target_path',
  stagingTargetPath: 'staging_target_path',
  volumePath: 'volume_path',
} as const;
type PathField = keyof typeof PATH_FIELDS;

/** `fn` with the named path fields of its request checked and made canonical first, in order. */
function confine<Req extends Partial<Record<PathField, string | null>>, Res>(
  k: KubeletDir,
  rpc: string,
  fields: readonly PathField[],
  fn: (req: Req, ctx: CallContext) => Promise<Res>,
): (req: Req, ctx: CallContext) => Promise<Res> {
  return async (req, ctx) => {
    const checked: Partial<Record<PathField, string>> = {};
    for (const f of fields)
      checked[f] =
        f === 'volumePath' ? await k.checkVolumePath(req[f], rpc) : await k.checkOptional(req[f], PATH_FIELDS[f], rpc);
    return fn({ ...req, ...checked }, ctx);
  };
}

/**
 * Wrap a node backend so every path it is handed is checked and canonical. One place for both
 * drivers (and for anything added to them later).
 */
export function confineToKubeletDir(backend: NodeBackend, kubeletDir: string): NodeBackend {
  const k = new KubeletDir(kubeletDir);
  const {
    nodeStageVolume: stage,
    nodeUnstageVolume: unstage,
    nodeGetVolumeStats: stats,
    nodeExpandVolume: expand,
  } = backend;
  return {
    capabilities: backend.capabilities,
    nodeGetInfo: (ctx) => backend.nodeGetInfo(ctx),
    nodePublishVolume: confine(k, 'NodePublishVolume', ['targetPath', 'stagingTargetPath'], backend.nodePublishVolume),
    nodeUnpublishVolume: confine(k, 'NodeUnpublishVolume', ['targetPath'], backend.nodeUnpublishVolume),
    ...(stage && { nodeStageVolume: confine(k, 'NodeStageVolume', ['stagingTargetPath'], stage) }),
    ...(unstage && { nodeUnstageVolume: confine(k, 'NodeUnstageVolume', ['stagingTargetPath'], unstage) }),
    ...(stats && { nodeGetVolumeStats: confine(k, 'NodeGetVolumeStats', ['volumePath', 'stagingTargetPath'], stats) }),
    ...(expand && { nodeExpandVolume: confine(k, 'NodeExpandVolume', ['volumePath', 'stagingTargetPath'], expand) }),
  };
}
