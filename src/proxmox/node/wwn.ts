// Which disk a Proxmox volume is on this VM, from what ControllerPublishVolume returned:
// publish_context { DevicePath: "/dev/disk/by-id/wwn-0x5056432d49443031", lun: "1" }.
import { InvalidArgument } from '../../errors.js';
import { normalizeWwn } from '../../os/scsi.js';
import { ciGet } from '../../node/common.js';
import { MAX_SLOT, MIN_SLOT, PUBLISH_CONTEXT_DEVICE_PATH, PUBLISH_CONTEXT_LUN, wwnHexForSlot } from '../contract.js';

export interface DiskRef {
  /** Lowercase hex without 0x. */
  wwn: string;
  lun?: number;
}

/**
 * The WWN comes from DevicePath's basename (`wwn-0x…`); when DevicePath is absent the slot number
 * in `lun` gives it through the PVC-ID scheme, so a publish context from either driver works.
 */
export function diskFromPublishContext(ctx: Record<string, string> | undefined | null, volumeId: string): DiskRef {
  const devicePath = ciGet(ctx, PUBLISH_CONTEXT_DEVICE_PATH)?.trim();
  const lunRaw = ciGet(ctx, PUBLISH_CONTEXT_LUN)?.trim();
  let lun: number | undefined;
  if (lunRaw) {
    if (!/^\d+$/.test(lunRaw) || Number(lunRaw) < MIN_SLOT || Number(lunRaw) > MAX_SLOT) {
      throw new InvalidArgument(
        `volume ${volumeId}: publish_context lun ${JSON.stringify(lunRaw)} is not a SCSI slot ${MIN_SLOT}..${MAX_SLOT}`,
      );
    }
    lun = Number(lunRaw);
  }
  if (devicePath) {
    const base = devicePath.split('/').pop() ?? '';
    const m = /^wwn-(0x[0-9a-fA-F]+)$/.exec(base);
    const hex = m?.[1];
    const wwn = hex ? normalizeWwn(hex) : undefined;
    if (!wwn) {
      throw new InvalidArgument(
        `volume ${volumeId}: publish_context DevicePath ${JSON.stringify(devicePath)} does not end in wwn-0x<16 or 32 hex digits>`,
      );
    }
    return lun === undefined ? { wwn } : { wwn, lun };
  }
  if (lun !== undefined) return { wwn: wwnHexForSlot(lun), lun };
  throw new InvalidArgument(
    `volume ${volumeId}: publish_context has neither DevicePath nor lun; was ControllerPublishVolume called for this node?`,
  );
}
