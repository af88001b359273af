// NodeExpandVolume and NodeGetVolumeStats for Proxmox disks. Both work from the volume path
// alone (kubelet and csi-sanity may omit the capability): a block device node bound on a file
// is a raw volume, a mount point is a filesystem volume whose device comes from its maj:min.
import { FailedPrecondition, InvalidArgument, NotFound, Unavailable } from '../../errors.js';
import { isCommandError } from '../../os/exec.js';
import { LuksKeyRejected } from '../../os/cryptsetup.js';
import { foreignMount } from '../../node/common.js';
import { nodeCall } from '../../node/call.js';
import { ENCRYPTION_PASSPHRASE_KEY, luksError } from './luks.js';
import { proxmoxMountOwnership } from './ownership.js';
import type { ProxmoxNodeHandler, ProxmoxNodeDeps } from './deps.js';
import { abnormal, healthy, mountedEntry, mountedUsage, probeVolumePath } from '../../node/stats.js';

/**
 * cryptsetup resize. With the volume key in the kernel keyring (the LUKS2 default) it needs the
 * passphrase, which kubelet sends only when the StorageClass names a node-expand secret.
 */
async function resizeMapping(
  d: ProxmoxNodeDeps,
  name: string,
  passphrase: string | undefined,
  volumeId: string,
): Promise<void> {
  try {
    await d.cryptsetup.resize(name, passphrase || undefined);
  } catch (e) {
    if (e instanceof LuksKeyRejected && !passphrase) {
      throw new FailedPrecondition(
        `volume ${volumeId}: growing the LUKS mapping ${name} needs the passphrase, and NodeExpandVolume got none; ` +
          'set csi.storage.k8s.io/node-expand-secret-name/namespace in the StorageClass to the node-stage Secret',
        { cause: e },
      );
    }
    throw luksError(e, volumeId);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Re-read the disk size until it reaches what the CO asked for (the resize may still be on its way). */
async function sizeAtLeast(
  d: ProxmoxNodeDeps,
  device: string,
  requiredBytes: number,
  volumeId: string,
): Promise<number> {
  const deadline = Date.now() + d.deviceWaitMs;
  for (;;) {
    await d.blockDevices.rescan(device);
    const size = await d.blockDevices.size(device);
    if (size >= requiredBytes) return size;
    if (Date.now() >= deadline) {
      throw new Unavailable(
        `volume ${volumeId}: ${device} is ${size} bytes on this node, less than the ${requiredBytes} requested; ` +
          'the resize has not reached this VM yet',
      );
    }
    await sleep(500);
  }
}

export const nodeExpandVolume: ProxmoxNodeHandler<'nodeExpandVolume'> = async (d, req, ctx) => {
  const rpc = 'NodeExpandVolume';
  const volumeId = req.volumeId;
  const volumePath = req.volumePath;
  const requiredBytes = Number(req.capacityRange?.requiredBytes ?? 0) || 0;

  return nodeCall({ rpc, volumeId, path: volumePath, locks: d.locks }, async () => {
    const st = await d.mounter.probe(volumePath);
    if (st.state === 'missing') throw new NotFound(`volume ${volumeId}: volume path ${volumePath} does not exist`);
    if (st.state === 'broken')
      throw new FailedPrecondition(`volume ${volumeId}: ${volumePath} is not usable: ${st.message}`);
    if (st.kind === 'symlink') {
      throw new InvalidArgument(
        `volume ${volumeId}: ${volumePath} is a symbolic link; node paths must be real directories or files inside the kubelet directory`,
      );
    }

    if (st.kind === 'block') {
      const majMin = await d.blockDevices.majMinOf(volumePath);
      if (!(await d.blockDevices.isDriverDisk(majMin)) && (await d.blockDevices.blockDeviceExists(majMin))) {
        throw new FailedPrecondition(
          `volume ${volumeId}: ${volumePath} is device ${majMin}, which this driver did not attach (no PVC-ID WWN); not touching it`,
        );
      }
      const device = await d.blockDevices.deviceByMajMin(majMin);
      if (!device)
        throw new FailedPrecondition(`volume ${volumeId}: the disk bound at ${volumePath} is gone from this node`);
      const size = await sizeAtLeast(d, device, requiredBytes, volumeId);
      ctx.log.info({ volumeId, device, size }, 'block volume size refreshed');
      return { capacityBytes: size };
    }

    const entry = await mountedEntry(d.mounter, volumePath, volumeId);
    const owner = await proxmoxMountOwnership(d, entry, volumePath);
    if (!owner.ours) throw foreignMount(volumeId, volumePath, entry, owner.why);
    let device = await d.blockDevices.deviceByMajMin(entry.majMin);
    if (!device)
      throw new FailedPrecondition(
        `volume ${volumeId}: the disk mounted at ${volumePath} (${entry.majMin}) is gone from this node`,
      );
    const mapping = await d.cryptsetup.byMajMin(entry.majMin);
    let size: number;
    if (mapping) {
      // LUKS: the disk grows, then the mapping on it, then the filesystem on the mapping.
      const disk = mapping.backing[0] && (await d.blockDevices.deviceByMajMin(mapping.backing[0]));
      if (!disk)
        throw new FailedPrecondition(
          `volume ${volumeId}: the disk under the LUKS mapping ${mapping.name} is gone from this node`,
        );
      size = await sizeAtLeast(d, disk, requiredBytes, volumeId);
      // A mapping opened after an offline expansion already spans the disk: no passphrase needed.
      const span = await d.cryptsetup.span(mapping.name);
      if (!span || span.offset + span.size < size) {
        await resizeMapping(d, mapping.name, req.secrets[ENCRYPTION_PASSPHRASE_KEY], volumeId);
      }
      device = mapping.device;
    } else {
      size = await sizeAtLeast(d, device, requiredBytes, volumeId);
    }
    try {
      await d.blockDevices.resizeFs(device, volumePath, entry.fstype);
    } catch (e) {
      if (isCommandError(e, 'exit') && /permission denied|operation not permitted/i.test(e.stderr)) {
        throw new FailedPrecondition(
          `volume ${volumeId}: the kernel refused to grow the mounted ${entry.fstype} filesystem on ${device}; ` +
            `online growth needs CAP_SYS_RESOURCE (ext4) / CAP_SYS_ADMIN (xfs): run the node plugin privileged. ${e.stderr}`,
          { cause: e },
        );
      }
      throw e;
    }
    ctx.log.info({ volumeId, device, size, fsType: entry.fstype }, 'filesystem grown');
    return { capacityBytes: size };
  });
};

export const nodeGetVolumeStats: ProxmoxNodeHandler<'nodeGetVolumeStats'> = async (d, req, _ctx) => {
  const rpc = 'NodeGetVolumeStats';
  const volumeId = req.volumeId;
  const volumePath = req.volumePath;
  return nodeCall({ rpc, volumeId, path: volumePath }, async () => {
    const probed = await probeVolumePath(d.mounter, volumePath);
    if (probed.kind === 'done') return probed.response;

    if (probed.state.kind === 'block') {
      const majMin = await d.blockDevices.majMinOf(volumePath);
      if (!(await d.blockDevices.deviceByMajMin(majMin))) {
        return abnormal(`the disk of volume ${volumeId} (${majMin}) is no longer attached to this node`);
      }
      const size = await d.blockDevices.size(volumePath);
      return healthy([{ unit: 'BYTES', total: size }]);
    }

    const entry = await mountedEntry(d.mounter, volumePath, volumeId);
    if (!(await d.blockDevices.deviceByMajMin(entry.majMin))) {
      return abnormal(
        `the disk under ${volumePath} (${entry.source}, ${entry.majMin}) is no longer attached to this node`,
      );
    }
    // An open LUKS mapping outlives the disk under it; the disk is what matters.
    const mapping = await d.cryptsetup.byMajMin(entry.majMin);
    if (mapping && !(mapping.backing[0] && (await d.blockDevices.deviceByMajMin(mapping.backing[0])))) {
      return abnormal(
        `the disk under the LUKS mapping ${mapping.name} of volume ${volumeId} is no longer attached to this node`,
      );
    }
    return await mountedUsage(d.statFs, volumePath);
  });
};
