// A volume handle read as the claim it names: null-free, so that every RPC that acts on a claim
// (DeleteVolume, expand, validate, snapshot and clone sources) refuses the same handles. A handle
// that is not one of nfs.csi.k8s.io's forms, or that names a folder the driver keeps for itself
// (reserved.ts), names no claim: the answer is the spec's for an unknown volume.
import { parseVolumeId, type VolumeRef } from '../../volume-id.js';
import { reservedPath } from '../../reserved.js';

/** The claim a handle names, or why it names none (a phrase after "the handle"/"volume <id>"). */
export function claimRef(id: string): VolumeRef | string {
  const ref = parseVolumeId(id);
  if (!ref) return 'is not an nfs.csi.k8s.io volume handle';
  const reserved = reservedPath(ref.share, ref.subDir);
  if (reserved) return `names no claim: ${reserved}`;
  return ref;
}
