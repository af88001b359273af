// NodeGetVolumeStats pieces shared by both backends.
import type { NodeGetVolumeStatsResponse } from '../csi/types.js';
import { InvalidArgument, NotFound } from '../errors.js';
import type { Mounter, MountEntry, PathState } from '../os/mounter.js';
import type { FsUsage, StatFs } from '../os/statfs.js';

export function fsUsage(u: FsUsage): NonNullable<NodeGetVolumeStatsResponse['usage']> {
  return [
    { unit: 'BYTES', total: u.totalBytes, available: u.availableBytes, used: u.usedBytes },
    { unit: 'INODES', total: u.totalInodes, available: u.freeInodes, used: u.usedInodes },
  ];
}

/**
 * An abnormal condition still carries one (zero) usage entry: kubelet discards a response whose
 * usage list is empty, and with it the condition we want it to report. Zero capacity makes
 * fill-level ratios NaN, so it cannot fire a "volume full" alert.
 */
export function abnormal(message: string): NodeGetVolumeStatsResponse {
  return {
    usage: [{ unit: 'BYTES', total: 0, available: 0, used: 0 }],
    volumeCondition: { abnormal: true, message },
  };
}

export function healthy(
  usage: NonNullable<NodeGetVolumeStatsResponse['usage']>,
  message = '',
): NodeGetVolumeStatsResponse {
  return { usage, volumeCondition: { abnormal: false, message } };
}

/**
 * First step of every stats call: a missing path is NotFound (as the spec and csi-sanity want);
 * a path that answers with ESTALE/ENOTCONN/EIO or not at all is an abnormal volume.
 */
export async function probeVolumePath(
  mounter: Mounter,
  volumePath: string,
): Promise<
  { kind: 'ok'; state: Extract<PathState, { state: 'ok' }> } | { kind: 'done'; response: NodeGetVolumeStatsResponse }
> {
  const st = await mounter.probe(volumePath);
  if (st.state === 'missing') throw new NotFound(`volume path ${volumePath} does not exist on this node`);
  if (st.state === 'ok' && st.kind === 'symlink') {
    throw new InvalidArgument(
      `volume path ${volumePath} is a symbolic link; node paths must be real directories or files inside the kubelet directory`,
    );
  }
  if (st.state === 'broken') {
    return { kind: 'done', response: abnormal(`volume path ${volumePath} is not usable (${st.errno}): ${st.message}`) };
  }
  return { kind: 'ok', state: st };
}

export async function mountedEntry(mounter: Mounter, volumePath: string, volumeId: string): Promise<MountEntry> {
  const entry = await mounter.find(volumePath);
  if (!entry) throw new NotFound(`volume ${volumeId} is not mounted at ${volumePath}`);
  return entry;
}

/** statfs of a mounted volume; a failure here (EIO, timeout) is reported as a condition, not an error. */
export async function mountedUsage(statFs: StatFs, volumePath: string): Promise<NodeGetVolumeStatsResponse> {
  try {
    return healthy(fsUsage(await statFs(volumePath)));
  } catch (e) {
    return abnormal(`statfs of ${volumePath} failed: ${e instanceof Error ? e.message : String(e)}`);
  }
}
