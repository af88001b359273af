// NodeStage/NodeUnstage for Proxmox disks: find the hot-plugged disk by WWN, create a filesystem
// only on a disk that has none, mount it at the staging path. An encrypted volume (see
// luks.ts) gets a LUKS header on first stage, is opened on every stage, and carries its
// filesystem on the mapping; unstage closes the mapping.
import type { CallContext, NodeStageVolumeRequest } from '../../csi/types.js';
import { FailedPrecondition, InvalidArgument, NotFound, Unavailable } from '../../errors.js';
import type { FormatOptions, FsType, ProbeResult } from '../../os/blockdevices.js';
import {
  accessTypeOf,
  ciGet,
  foreignMount,
  isReaderOnlyMode,
  mountFlagsOf,
  prepareTargetDir,
  uniq,
} from '../../node/common.js';
import { nodeCall } from '../../node/call.js';
import { proxmoxMountOwnership } from './ownership.js';
import type { ProxmoxNodeHandler, ProxmoxNodeDeps } from './deps.js';
import { closeEncrypted, encryptionOf, LUKS_FS_TYPE, mapperName, openEncrypted } from './luks.js';
import { type DiskRef, diskFromPublishContext } from './wwn.js';
import { FS_TYPES, isPvcIdWwn, FSTYPE_KEY, VOLUME_CONTEXT_BLOCK_SIZE, VOLUME_CONTEXT_INODE_SIZE } from '../contract.js';

const SUPPORTED_FS: readonly FsType[] = FS_TYPES;

export async function findDisk(d: ProxmoxNodeDeps, disk: DiskRef, volumeId: string, ctx: CallContext): Promise<string> {
  // Only a disk the controller attached carries a PVC-ID WWN; any other WWN (the boot disk, a
  // disk someone else plugged in) is never staged, formatted or bound into a pod.
  if (!isPvcIdWwn(disk.wwn)) {
    throw new InvalidArgument(
      `volume ${volumeId}: WWN 0x${disk.wwn} is not one this driver gives its disks (hex of "PVC-ID<slot>", e.g. 0x5056432d49443031); refusing to use that disk`,
    );
  }
  const dev = await d.blockDevices.findByWwn(disk.wwn, { waitMs: d.deviceWaitMs, signal: ctx.signal });
  if (dev) return dev;
  const slot = disk.lun ? ` (scsi${disk.lun})` : '';
  throw new NotFound(
    `volume ${volumeId}: no disk with WWN 0x${disk.wwn}${slot} on node ${d.nodeId}: none under ` +
      `${d.sysfsRoot}/bus/scsi/devices (vendor QEMU, wwid naa.${disk.wwn}) nor ${d.deviceDir}/wwn-0x${disk.wwn} ` +
      `after a SCSI rescan and ${d.deviceWaitMs} ms; is the disk attached to VM ${d.nodeId}?`,
  );
}

/** Requested filesystem type: the capability's, else the one recorded in the volume context. */
export function requestedFsType(req: NodeStageVolumeRequest): FsType | undefined {
  const raw = (req.volumeCapability?.mount?.fsType || ciGet(req.volumeContext, FSTYPE_KEY) || '').trim().toLowerCase();
  if (!raw) return undefined;
  if (!(SUPPORTED_FS as readonly string[]).includes(raw)) {
    throw new InvalidArgument(
      `volume ${req.volumeId}: fsType ${JSON.stringify(raw)} is not supported; use ext4 or xfs`,
    );
  }
  return raw as FsType;
}

function powerOfTwo(
  value: string | undefined,
  key: string,
  min: number,
  max: number,
  volumeId: string,
): number | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  const n = Number(value.trim());
  if (!Number.isInteger(n) || n < min || n > max || (n & (n - 1)) !== 0) {
    throw new InvalidArgument(
      `volume ${volumeId}: volume context ${key}=${JSON.stringify(value)} must be a power of two between ${min} and ${max}`,
    );
  }
  return n;
}

export function formatOptions(vc: Record<string, string> | undefined, fsType: FsType, volumeId: string): FormatOptions {
  const blockSize = powerOfTwo(
    ciGet(vc, VOLUME_CONTEXT_BLOCK_SIZE),
    VOLUME_CONTEXT_BLOCK_SIZE,
    fsType === 'xfs' ? 512 : 1024,
    65536,
    volumeId,
  );
  const inodeSize = powerOfTwo(
    ciGet(vc, VOLUME_CONTEXT_INODE_SIZE),
    VOLUME_CONTEXT_INODE_SIZE,
    128,
    fsType === 'xfs' ? 2048 : 4096,
    volumeId,
  );
  return { ...(blockSize ? { blockSize } : {}), ...(inodeSize ? { inodeSize } : {}) };
}

/**
 * The last checks before anything writes a header (mkfs, luksFormat) on a disk blkid found no
 * signature on: no signature is not proof of no data — a raw (block-mode) volume has none — so
 * its first MiB must be zeros; and the WWN must still name this very device (a disk unplugged and
 * another plugged in between the lookup and now could have taken its name).
 */
async function assertFormattable(
  d: ProxmoxNodeDeps,
  disk: DiskRef,
  device: string,
  majMin: string,
  volumeId: string,
  knownEmpty = false,
): Promise<void> {
  if (!knownEmpty && (await d.blockDevices.hasData(device))) {
    throw new FailedPrecondition(
      `volume ${volumeId}: disk ${device} has no filesystem signature but is not empty (non-zero data in its first MiB); ` +
        'refusing to format it — it may hold a raw block volume. Wipe it by hand if it really is unused',
    );
  }
  const again = await d.blockDevices.findByWwn(disk.wwn, { waitMs: 0 });
  if (again !== device || (await d.blockDevices.majMinOf(device)) !== majMin) {
    throw new Unavailable(
      `volume ${volumeId}: the disk with WWN 0x${disk.wwn} changed while staging (${device} → ${again ?? 'gone'}); retry`,
    );
  }
}

export const nodeStageVolume: ProxmoxNodeHandler<'nodeStageVolume'> = async (d, req, ctx) => {
  const rpc = 'NodeStageVolume';
  const volumeId = req.volumeId;
  const staging = req.stagingTargetPath;
  const access = accessTypeOf(req.volumeCapability, rpc);
  const disk = diskFromPublishContext(req.publishContext, volumeId);
  const wanted = access === 'mount' ? requestedFsType(req) : undefined;

  const enc = encryptionOf(req.secrets, req.volumeContext, volumeId);
  if (enc.required && access === 'block') {
    throw new InvalidArgument(
      `volume ${volumeId}: LUKS encryption (a node-stage secret) is supported for filesystem volumes only; ` +
        'use volumeMode: Filesystem, or a StorageClass without csi.storage.k8s.io/node-stage-secret-name for raw block volumes',
    );
  }

  return nodeCall({ rpc, volumeId, path: staging, locks: d.locks }, async () => {
    const disk0 = await findDisk(d, disk, volumeId, ctx);
    // A raw block volume needs nothing at the staging path: publish binds the device itself.
    if (access === 'block') return {};

    const readOnly = isReaderOnlyMode(req.volumeCapability);
    let device = disk0;
    const disk0MajMin = await d.blockDevices.majMinOf(disk0);
    const existing = await d.mounter.find(staging);
    if (existing) {
      if (existing.majMin === disk0MajMin && !enc.required) return {};
      const mapping = enc.required ? (await d.cryptsetup.holdersOf(disk0))[0] : undefined;
      if (mapping && existing.majMin === mapping.majMin) return {};
      throw new FailedPrecondition(
        `volume ${volumeId}: staging path ${staging} already has ${existing.source} (${existing.majMin}) mounted, ` +
          `not ${enc.required ? `the LUKS mapping of ${device}` : device} (${mapping?.majMin ?? disk0MajMin}, WWN 0x${disk.wwn})`,
      );
    }

    if (enc.required) {
      const outer = await d.blockDevices.probe(disk0);
      if (!outer.fsType && outer.ptType) {
        throw new FailedPrecondition(
          `volume ${volumeId}: disk ${disk0} has a ${outer.ptType} partition table and no filesystem; refusing to format it`,
        );
      }
      if (!outer.fsType) await assertFormattable(d, disk, disk0, disk0MajMin, volumeId);
      const mapping = await openEncrypted(d, {
        device: disk0,
        volumeId,
        passphrase: enc.passphrase,
        probedType: outer.fsType,
        mayFormat: !readOnly,
        log: ctx.log,
      });
      device = mapping.device;
    }

    // blkid -p only when the device's first and last blocks are neither all zero nor exactly
    // the filesystem asked for (src/os/signature.ts): on the everyday stage it is a 3–6 ms exec.
    // Inside a LUKS mapping blkid always decides (a fresh mapping decrypts zeros to noise anyway).
    const quick = enc.required ? undefined : await d.blockDevices.signature(device);
    const fast = quick?.kind === 'empty' || (quick?.kind === 'fs' && (!wanted || wanted === quick.fsType));
    const found: ProbeResult =
      fast && quick.kind === 'fs' ? { fsType: quick.fsType } : fast ? {} : await d.blockDevices.probe(device);
    let fsType: string;
    if (found.fsType === LUKS_FS_TYPE) {
      throw new FailedPrecondition(
        `volume ${volumeId}: disk ${device} is LUKS-encrypted, but the request carries no node-stage secret with ` +
          '"encryption-passphrase"; the PersistentVolume must name one (csi.nodeStageSecretRef, from the StorageClass\'s ' +
          'csi.storage.k8s.io/node-stage-secret-name/namespace)',
      );
    }
    if (found.fsType) {
      if (wanted && wanted !== found.fsType) {
        throw new FailedPrecondition(
          `volume ${volumeId}: disk ${device} already holds a ${found.fsType} filesystem but ${wanted} was requested; ` +
            'existing data is never reformatted',
        );
      }
      fsType = found.fsType;
    } else if (found.ptType) {
      throw new FailedPrecondition(
        `volume ${volumeId}: disk ${device} has a ${found.ptType} partition table and no filesystem; refusing to format it`,
      );
    } else {
      if (readOnly) {
        throw new FailedPrecondition(
          `volume ${volumeId}: disk ${device} has no filesystem and the access mode is read-only, so none can be created`,
        );
      }
      const fs = wanted ?? 'ext4';
      const opts = formatOptions(req.volumeContext, fs, volumeId);
      // Inside a fresh LUKS mapping the disk's zeros decrypt to noise: checked on the disk before luksFormat instead.
      // A disk the in-process read found all zero needs no second look at its first MiB.
      if (!enc.required) await assertFormattable(d, disk, disk0, disk0MajMin, volumeId, quick?.kind === 'empty');
      ctx.log.info({ volumeId, device, fsType: fs, ...opts }, 'creating filesystem on empty disk');
      await d.blockDevices.format(device, fs, opts);
      fsType = fs;
    }

    const flags = uniq([
      ...mountFlagsOf(req.volumeCapability),
      ...(readOnly ? ['ro'] : []),
      // Clones and snapshots of an xfs disk share its UUID; xfs refuses a second mount without this.
      ...(fsType === 'xfs' ? ['nouuid'] : []),
    ]);
    await prepareTargetDir(staging, volumeId);
    await d.mounter.mount(device, staging, fsType, flags);
    ctx.log.info({ volumeId, device, staging, fsType, flags, encrypted: enc.required }, 'volume staged');
    return {};
  });
};

export const nodeUnstageVolume: ProxmoxNodeHandler<'nodeUnstageVolume'> = async (d, req, ctx) => {
  const rpc = 'NodeUnstageVolume';
  const volumeId = req.volumeId;
  const staging = req.stagingTargetPath;
  return nodeCall(
    {
      rpc,
      volumeId,
      path: staging,
      locks: d.locks,
      inUse: `staging path ${staging} is still in use (published somewhere, or open)`,
    },
    async () => {
      const entry = await d.mounter.find(staging);
      // The mapping under the mount (ours, or upstream's sdX-encrypted), else ours by name: a retry
      // after a crash between umount and close finds no mount any more.
      const mapping =
        (entry && (await d.cryptsetup.byMajMin(entry.majMin))) || (await d.cryptsetup.byName(mapperName(volumeId)));
      const left = await d.mounter.unmount(staging, {
        timeoutMs: d.unmountTimeoutMs,
        force: false,
        owns: async (m) => (await proxmoxMountOwnership(d, m, staging)).ours,
      });
      // A mount that is not this driver's disk (nor a LUKS mapping on one) stays, and so does its mapping.
      if (left) throw foreignMount(volumeId, staging, left, (await proxmoxMountOwnership(d, left, staging)).why);
      if (mapping) await closeEncrypted(d, mapping, volumeId, ctx.log);
      ctx.log.debug({ volumeId, staging }, 'volume unstaged');
      return {};
    },
  );
};
