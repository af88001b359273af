// NodePublish/NodeUnpublish for Proxmox disks: bind the staged filesystem (or the raw device
// node) onto the pod's target path, and take it away again. SINGLE_NODE_SINGLE_WRITER (a
// ReadWriteOncePod claim) is published at one target only; the other single-node modes may be
// bound at several targets (pods of one node sharing a ReadWriteOnce claim).
import type { NodePublishVolumeRequest } from '../../csi/types.js';
import { AlreadyExists, FailedPrecondition } from '../../errors.js';
import { defined } from '../../defined.js';
import type { MountEntry } from '../../os/mounter.js';
import {
  accessModeOf,
  accessTypeOf,
  foreignMount,
  isReaderOnlyMode,
  mountFlagsOf,
  prepareTargetDir,
  prepareTargetFile,
  removePublishTarget,
} from '../../node/common.js';
import { nodeCall } from '../../node/call.js';
import { mountedDevice, proxmoxMountOwnership } from './ownership.js';
import type { ProxmoxNodeHandler } from './deps.js';
import { findDisk } from './stage.js';
import { devicePublications, filesystemPublications } from './publications.js';
import { diskFromPublishContext } from './wwn.js';

function checkReadonly(existing: MountEntry, readonly: boolean, volumeId: string, target: string): void {
  const isRo = existing.options.includes('ro');
  if (isRo !== readonly) {
    throw new AlreadyExists(
      `volume ${volumeId} is already published at ${target} ${isRo ? 'read-only' : 'read-write'}, ` +
        `but this request wants it ${readonly ? 'read-only' : 'read-write'}`,
    );
  }
}

/** Refuses a second target for a single-writer volume; `elsewhere` is only read when it matters. */
async function checkSingleWriter(
  req: NodePublishVolumeRequest,
  volumeId: string,
  target: string,
  elsewhere: () => Promise<string[]>,
): Promise<void> {
  if (accessModeOf(req.volumeCapability) !== 'SINGLE_NODE_SINGLE_WRITER') return;
  const others = await elsewhere();
  if (others.length === 0) return;
  throw new FailedPrecondition(
    `volume ${volumeId} has access mode SINGLE_NODE_SINGLE_WRITER and is already published at ${others.join(', ')} on this node; ` +
      `it cannot also be published at ${target} (unpublish it there first, or use SINGLE_NODE_MULTI_WRITER / ReadWriteOnce to share it between pods)`,
  );
}

export const nodePublishVolume: ProxmoxNodeHandler<'nodePublishVolume'> = async (d, req, ctx) => {
  const rpc = 'NodePublishVolume';
  const volumeId = req.volumeId;
  const target = req.targetPath;
  const access = accessTypeOf(req.volumeCapability, rpc);
  const staging = req.stagingTargetPath;
  const readonly = req.readonly || isReaderOnlyMode(req.volumeCapability);
  const disk = access === 'block' ? diskFromPublishContext(req.publishContext, volumeId) : undefined;

  return nodeCall({ rpc, volumeId, path: target, locks: d.locks }, async () => {
    if (access === 'mount') {
      // Both ends from one read of the mount table.
      const [staged, existing] = await d.mounter.findEach([staging, target]);
      if (!staged) {
        throw new FailedPrecondition(
          `volume ${volumeId} is not staged at ${staging}; NodeStageVolume must succeed first`,
        );
      }
      const owner = await proxmoxMountOwnership(d, staged, staging);
      if (!owner.ours) throw foreignMount(volumeId, staging, staged, owner.why);
      if (existing) {
        if (existing.majMin === staged.majMin && existing.fsroot === staged.fsroot) {
          checkReadonly(existing, readonly, volumeId, target);
          return {};
        }
        throw new AlreadyExists(
          `target ${target} already has ${existing.source} mounted, not volume ${volumeId} from ${staging}`,
        );
      }
      await checkSingleWriter(req, volumeId, target, () => filesystemPublications(d.mounter, staged));
      await prepareTargetDir(target, volumeId);
      await d.mounter.bindMount(staging, target, { readonly, flags: mountFlagsOf(req.volumeCapability) });
      ctx.log.info({ volumeId, staging, target, readonly }, 'volume published');
      return {};
    }

    const device = await findDisk(d, defined(disk, "the block volume's disk"), volumeId, ctx);
    const deviceMajMin = await d.blockDevices.majMinOf(device);
    const existing = await d.mounter.find(target);
    if (existing) {
      // Not a plain stat of the target: a foreign dead NFS mount there would hang it.
      const boundMajMin = await mountedDevice(d.blockDevices, existing, target);
      if (boundMajMin === deviceMajMin) {
        checkReadonly(existing, readonly, volumeId, target);
        return {};
      }
      throw new AlreadyExists(
        `target ${target} already has ${existing.source} mounted, not ${device} of volume ${volumeId}`,
      );
    }
    await checkSingleWriter(req, volumeId, target, () =>
      devicePublications(d.mounter, d.blockDevices, device, deviceMajMin),
    );
    await prepareTargetFile(target, volumeId);
    await d.mounter.bindMount(device, target, { readonly });
    ctx.log.info({ volumeId, device, target, readonly }, 'block volume published');
    return {};
  });
};

export const nodeUnpublishVolume: ProxmoxNodeHandler<'nodeUnpublishVolume'> = async (d, req, ctx) => {
  const rpc = 'NodeUnpublishVolume';
  const volumeId = req.volumeId;
  const target = req.targetPath;
  return nodeCall(
    { rpc, volumeId, path: target, locks: d.locks, inUse: `target ${target} is still in use` },
    async () => {
      const left = await d.mounter.unmount(target, {
        timeoutMs: d.unmountTimeoutMs,
        force: false,
        owns: async (m) => (await proxmoxMountOwnership(d, m, target)).ours,
      });
      if (left) throw foreignMount(volumeId, target, left, (await proxmoxMountOwnership(d, left, target)).why);
      if (await removePublishTarget(target, volumeId, { allowEmptyFile: true }))
        ctx.log.debug({ volumeId, target }, 'volume unpublished, target removed');
      return {};
    },
  );
};
