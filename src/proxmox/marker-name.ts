// Names of VolumeAttributesClass marker volumes (controller/params/mutable.ts says what they are
// for): `<disk>_vac<seq>[-b0|1][-i<iops>][-m<mbps>]`, e.g. `vm-9999-pvc-a_vac3-b1-i500-m40`.
//
// The name must be one pve-storage accepts, or the marker is lost: LvmThinPlugin parse_volname
// runs parse_lvm_name (letters, digits, `-`, `_`, `.`; first and last a letter or digit) and
// then wants `(vm|base)-<vmid>-…`; a volume it cannot parse is left out of the content listing
// and every GET/DELETE of it answers 500 "lvm name '…' contains illegal characters". And it must
// not be taken for anything else: `_` never occurs in a Kubernetes object name (PV names are DNS
// subdomains) nor in the names upstream proxmox-csi-plugin gives disks (`vm-<vmid>-<PV name>`), and
// Proxmox's own names (`vm-<vmid>-disk-N`, `-cloudinit`, `-state-<snapshot>`) do not end in
// `_vac<digits>` with only these suffixes after a driver disk's name. diskNameFor hashes the rare
// CSI name (not from Kubernetes) that would look like one (volume-id.ts).
//
// Versions before this one used `+vac` in place of `_vac`. LVM takes `+`, so those markers were
// created, but Proxmox lists none of them and cannot free them through its API: they are still
// parsed here (their sequence numbers count, a listing that shows one is honoured), and
// docs/features.md says how to find them on a host and rename or remove them.

/** Values a marker records; a key left out keeps its earlier value. 0 = no limit. */
export interface MarkerValues {
  backup?: boolean;
  iops?: number;
  mbps?: number;
}

const MARKER_RE = /^(.+)([_+])vac(\d{1,9})((?:-[bim]\d{1,15})*)$/;

export function markerName(disk: string, seq: number, m: MarkerValues): string {
  let name = `${disk}_vac${seq}`;
  if (m.backup !== undefined) name += `-b${m.backup ? 1 : 0}`;
  if (m.iops !== undefined) name += `-i${m.iops}`;
  if (m.mbps !== undefined) name += `-m${m.mbps}`;
  return name;
}

export interface ParsedMarker {
  disk: string;
  seq: number;
  values: MarkerValues;
  /** The `+vac` form of older versions, which Proxmox cannot list or free through its API. */
  legacy: boolean;
}

/** The marker a volume name encodes, when it is one of `disk`'s (or of any disk without `disk`). */
export function parseMarker(name: string, disk?: string): ParsedMarker | undefined {
  const m = MARKER_RE.exec(name);
  if (!m || (disk !== undefined && m[1] !== disk)) return undefined;
  const [, owner = '', sep, seq, parts = ''] = m;
  const values: MarkerValues = {};
  for (const part of parts.split('-').filter(Boolean)) {
    const n = Number(part.slice(1));
    if (part[0] === 'b') values.backup = n === 1;
    else if (part[0] === 'i') values.iops = n;
    else values.mbps = n;
  }
  return { disk: owner, seq: Number(seq), values, legacy: sep === '+' };
}

export const isMarkerName = (name: string): boolean => parseMarker(name) !== undefined;
