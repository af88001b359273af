// The node half of nfs.csi.k8s.io: a kernel NFS mount per publish, no staging. Every mount and
// unmount is bounded: a mount that hangs is killed with its children (upstream left it hanging),
// a dead mount is detached with umount -f / -l, a stale one is remounted.
import type { Logger } from 'pino';
import type {
  CallContext,
  NodeBackend,
  NodeCapability,
  NodePublishVolumeRequest,
  NodePublishVolumeResponse,
} from '../../csi/types.js';
import {
  AlreadyExists,
  DeadlineExceeded,
  FailedPrecondition,
  Internal,
  InvalidArgument,
  NotFound,
  Unavailable,
} from '../../errors.js';
import { createExec, type Exec, isCommandError } from '../../os/exec.js';
import { createLinuxMounter, type Mounter } from '../../os/mounter.js';
import { canonicalPath } from '../../os/paths.js';
import type { MountEntry } from '../../os/mounter.js';
import { parseVolumeId } from '../contract.js';
import { createStatFs, type StatFs } from '../../os/statfs.js';
import { promises as fs } from 'node:fs';
import { KeyedLock } from '../../locks.js';
import {
  accessModeOf,
  accessTypeOf,
  asCsiError,
  foreignMount,
  isReaderOnlyMode,
  mountFlagsOf,
  prepareTargetDir,
  removePublishTarget,
  uniq,
} from '../../node/common.js';
import { nodeCall } from '../../node/call.js';
import { hostForSource, parseNfsContext, sameNfsSource, type NfsVolumeSource } from './context.js';
import { confineToKubeletDir, DEFAULT_KUBELET_DIR } from '../../node/paths.js';
import { mountedEntry, mountedUsage, probeVolumePath } from '../../node/stats.js';
import type { VolumeUsage } from './usage.js';

export const NFS_NODE_CAPABILITIES: readonly NodeCapability[] = [
  'GET_VOLUME_STATS',
  'VOLUME_CONDITION',
  'SINGLE_NODE_MULTI_WRITER',
];

export interface NfsNodeOptions {
  nodeId: string;
  log: Logger;
  /** Node calls act only on paths strictly inside this directory. Default /var/lib/kubelet. */
  kubeletDir?: string;
  /** Upper bound for one mount(8) run; the mount and its helpers are killed after it. */
  mountTimeoutMs: number;
  /** Upper bound for each umount step (plain, -f, -l). Default: mountTimeoutMs. */
  unmountTimeoutMs?: number;
  exec?: Exec;
  mounter?: Mounter;
  statFs?: StatFs;
  /** Test servers on non-standard ports (--nfs-port/--nfs-mount-port): added as port=/mountport= unless given. */
  nfsPort?: number;
  nfsMountPort?: number;
  /** chmod applied after mount when the volume context has no mountPermissions; 0 = leave as is (upstream default). */
  defaultMountPermissions?: number;
  /** Measures each volume's directory when kubelet asks for its stats (the soft-quota metrics). */
  usage?: VolumeUsage;
}

const isNfs = (fstype: string) => fstype === 'nfs' || fstype === 'nfs4';

/**
 * Whether the mount at a target is this volume's, from what NodeUnpublishVolume has: the volume
 * id. A handle this driver composes (`server#share#subDir#…`, or the older `server/share/subDir`)
 * names its export, and the mount must be exactly that export. A static PV's handle is only an
 * ID and its export lives in volumeAttributes, which unpublish is not given: there an NFS mount
 * at the path kubelet named for this volume (inside the kubelet directory, checked before) is
 * taken as the volume's. Anything that is not NFS is never ours.
 */
export function nfsMountOwnership(volumeId: string): (entry: MountEntry) => { ours: boolean; why: string } {
  const ref = parseVolumeId(volumeId);
  const expected = ref ? `${hostForSource(ref.server)}:${ref.share.replace(/\/+$/, '')}/${ref.subDir}` : undefined;
  return (entry) => {
    if (!isNfs(entry.fstype)) return { ours: false, why: `not an NFS mount` };
    if (expected && !sameNfsSource(entry.source, expected))
      return { ours: false, why: `the volume handle names ${expected}` };
    return { ours: true, why: '' };
  };
}

export function nfsMountOptions(
  req: Pick<NodePublishVolumeRequest, 'readonly' | 'volumeCapability'>,
  vol: NfsVolumeSource,
  ports: { nfsPort?: number | undefined; nfsMountPort?: number | undefined } = {},
): string[] {
  const readonly = req.readonly || isReaderOnlyMode(req.volumeCapability);
  const opts = [...mountFlagsOf(req.volumeCapability), ...(readonly ? ['ro'] : []), ...vol.mountOptions];
  const has = (name: string) => opts.some((o) => o === name || o.startsWith(`${name}=`));
  if (ports.nfsPort && !has('port')) opts.push(`port=${ports.nfsPort}`);
  if (ports.nfsMountPort && !has('mountport')) opts.push(`mountport=${ports.nfsMountPort}`);
  return uniq(opts);
}

/** mount.nfs failures in the words a person can act on. */
export function mountError(e: unknown, source: string, target: string, timeoutMs: number) {
  if (isCommandError(e, 'timeout')) {
    return new DeadlineExceeded(
      `mounting ${source} at ${target} did not finish within ${timeoutMs} ms; the mount process was killed. Is the NFS server reachable from this node?`,
      { cause: e },
    );
  }
  if (isCommandError(e, 'exit')) {
    const why = e.stderr || e.message;
    const msg = `mounting ${source} at ${target} failed: ${why}`;
    if (/access denied|permission denied|not permitted/i.test(why)) return new FailedPrecondition(msg, { cause: e });
    if (/no such file or directory/i.test(why)) return new NotFound(msg, { cause: e });
    if (/invalid argument|bad option|incorrect mount option|unknown option/i.test(why))
      return new InvalidArgument(msg, { cause: e });
    if (
      /connection refused|timed out|no route to host|network is unreachable|name or service not known|resolve/i.test(
        why,
      )
    ) {
      return new Unavailable(msg, { cause: e });
    }
    return new Internal(msg, { cause: e });
  }
  return asCsiError(e, `mounting ${source} at ${target}`);
}

async function applyPermissions(target: string, mode: number, log: Logger): Promise<void> {
  const st = await fs.stat(target);
  if ((st.mode & 0o7777) === mode) return;
  log.debug({ target, from: (st.mode & 0o7777).toString(8), to: mode.toString(8) }, 'chmod volume root');
  await fs.chmod(target, mode);
}

export function createNfsNode(o: NfsNodeOptions): NodeBackend {
  const exec = o.exec ?? createExec();
  const mounter = o.mounter ?? createLinuxMounter({ exec });
  const statFs = o.statFs ?? createStatFs(exec);
  const unmountTimeoutMs = o.unmountTimeoutMs ?? o.mountTimeoutMs;
  const locks = new KeyedLock();

  const publish = async (req: NodePublishVolumeRequest, ctx: CallContext): Promise<NodePublishVolumeResponse> => {
    const rpc = 'NodePublishVolume';
    const volumeId = req.volumeId;
    const target = req.targetPath;
    if (accessTypeOf(req.volumeCapability, rpc) === 'block') {
      throw new InvalidArgument(
        `volume ${volumeId}: NFS volumes can only be published with the mount access type, not block`,
      );
    }
    const vol = parseNfsContext(req.volumeContext, volumeId);
    const readonly = req.readonly || isReaderOnlyMode(req.volumeCapability);
    const options = nfsMountOptions(req, vol, { nfsPort: o.nfsPort, nfsMountPort: o.nfsMountPort });
    const perms = vol.mountPermissions ?? o.defaultMountPermissions ?? 0;

    return nodeCall({ rpc, volumeId, path: target, locks }, async () => {
      const canonicalTarget = await canonicalPath(target);
      if (accessModeOf(req.volumeCapability) === 'SINGLE_NODE_SINGLE_WRITER') {
        const other = (await mounter.list()).find(
          (m) => isNfs(m.fstype) && sameNfsSource(m.source, vol.source) && m.target !== canonicalTarget,
        );
        if (other) {
          throw new FailedPrecondition(
            `volume ${volumeId} has access mode SINGLE_NODE_SINGLE_WRITER and is already published at ${other.target}`,
          );
        }
      }

      const existing = await mounter.find(target);
      if (existing) {
        if (!isNfs(existing.fstype) || !sameNfsSource(existing.source, vol.source)) {
          throw new AlreadyExists(
            `target ${target} already has ${existing.source} (${existing.fstype}) mounted, not ${vol.source}`,
          );
        }
        const health = await mounter.probe(target);
        if (health.state === 'broken' && (health.errno === 'ESTALE' || health.errno === 'ENOTCONN')) {
          ctx.log.warn(
            { volumeId, target, source: existing.source, errno: health.errno },
            'stale NFS mount at target; remounting',
          );
          const left = await mounter.unmount(target, {
            timeoutMs: unmountTimeoutMs,
            force: true,
            owns: (m) => isNfs(m.fstype) && sameNfsSource(m.source, vol.source),
          });
          if (left) throw foreignMount(volumeId, target, left, `the volume is ${vol.source}`);
        } else if (health.state === 'broken') {
          throw new Unavailable(
            `volume ${volumeId}: the mount at ${target} does not answer (${health.errno}: ${health.message})`,
          );
        } else {
          if (existing.options.includes('ro') !== readonly) {
            throw new AlreadyExists(
              `volume ${volumeId} is already mounted at ${target} ${readonly ? 'read-write' : 'read-only'}`,
            );
          }
          if (perms > 0 && !readonly) await applyPermissions(target, perms, ctx.log);
          return {};
        }
      }

      await prepareTargetDir(target, volumeId);
      try {
        await mounter.mount(vol.source, target, 'nfs', options, { timeoutMs: o.mountTimeoutMs, signal: ctx.signal });
      } catch (e) {
        throw mountError(e, vol.source, target, o.mountTimeoutMs);
      }
      if (perms > 0 && !readonly) await applyPermissions(target, perms, ctx.log);
      ctx.log.info(
        { volumeId, source: vol.source, target, options, ...(vol.ephemeral ? { inline: true } : {}) },
        'NFS volume mounted',
      );
      return {};
    });
  };

  const backend: NodeBackend = {
    capabilities: NFS_NODE_CAPABILITIES,

    async nodeGetInfo() {
      return { nodeId: o.nodeId };
    },

    nodePublishVolume: publish,

    async nodeUnpublishVolume(req, ctx) {
      const rpc = 'NodeUnpublishVolume';
      const volumeId = req.volumeId;
      const target = req.targetPath;
      return nodeCall({ rpc, volumeId, path: target, locks }, async () => {
        const ownership = nfsMountOwnership(volumeId);
        const left = await mounter.unmount(target, {
          timeoutMs: unmountTimeoutMs,
          force: true,
          owns: (m) => ownership(m).ours,
        });
        if (left) throw foreignMount(volumeId, target, left, ownership(left).why);
        if (await removePublishTarget(target, volumeId, { allowEmptyFile: false })) {
          ctx.log.debug({ volumeId, target }, 'NFS volume unmounted, target removed');
        }
        return {};
      });
    },

    async nodeGetVolumeStats(req) {
      const rpc = 'NodeGetVolumeStats';
      const volumeId = req.volumeId;
      const volumePath = req.volumePath;
      return nodeCall({ rpc, volumeId, path: volumePath }, async () => {
        const probed = await probeVolumePath(mounter, volumePath);
        if (probed.kind === 'done') return probed.response;
        await mountedEntry(mounter, volumePath, volumeId);
        const stats = await mountedUsage(statFs, volumePath);
        // statfs is the whole share's; the claim's own usage is measured apart, in the background.
        if (!stats.volumeCondition?.abnormal) o.usage?.observe(volumeId, volumePath);
        return stats;
      });
    },
  };
  return confineToKubeletDir(backend, o.kubeletDir ?? DEFAULT_KUBELET_DIR);
}
