// An in-memory BlockDevices: disks by WWN with a probe result, a size and a device number.
import type { BlockDevices, FsType, ProbeResult } from '../../../../src/os/blockdevices.js';
import type { Signature } from '../../../../src/os/signature.js';

export class FakeDisks implements BlockDevices {
  devices = new Map<string, { device: string; majMin: string; probe: ProbeResult; size: number }>();
  formats: Array<[string, FsType, object]> = [];
  foreign = 0;
  formatDelayMs = 0;
  gone = new Set<string>();

  add(wwn: string, device: string, majMin: string, probe: ProbeResult = {}, size = 1 << 30) {
    this.devices.set(wwn, { device, majMin, probe, size });
  }
  byDevice(device: string) {
    return [...this.devices.values()].find((d) => d.device === device);
  }
  async findByWwn(wwn: string) {
    return this.devices.get(wwn)?.device;
  }
  /** The disk with this WWN (mappings: `mapper-<name>`); fails the test when there is none. */
  disk(wwn: string) {
    const d = this.devices.get(wwn);
    if (!d) throw new Error(`fake disks: no disk with WWN ${wwn}`);
    return d;
  }
  /** The disk at this device path; fails the test when there is none. */
  diskAt(device: string) {
    const d = this.byDevice(device);
    if (!d) throw new Error(`fake disks: no disk at ${device}`);
    return d;
  }
  async probe(device: string) {
    this.probes++;
    return { ...this.diskAt(device).probe };
  }
  /** The in-process answer per device; without one: 'unknown' (the stage asks probe(), i.e. blkid). */
  signatures = new Map<string, Signature>();
  probes = 0;
  async signature(device: string): Promise<Signature> {
    return this.signatures.get(device) ?? { kind: 'unknown' };
  }
  async format(device: string, fsType: FsType, opts: object = {}) {
    await new Promise((r) => setTimeout(r, this.formatDelayMs));
    this.formats.push([device, fsType, opts]);
    this.diskAt(device).probe = { fsType };
    if (this.signatures.has(device)) this.signatures.set(device, { kind: 'fs', fsType });
  }
  async size(device: string) {
    return this.byDevice(device)?.size ?? 0;
  }
  async rescan() {}
  async resizeFs() {}
  async majMinOf(p: string) {
    const d = this.byDevice(p);
    if (!d) throw new Error(`${p} is not a block device`);
    return d.majMin;
  }
  async deviceByMajMin(mm: string) {
    const d = [...this.devices.values()].find((x) => x.majMin === mm);
    return d && !this.gone.has(mm) ? d.device : undefined;
  }
  async foreignSlots() {
    return this.foreign;
  }
  /** A disk added here with a PVC-ID WWN stands for one the controller attached. */
  async isDriverDisk(mm: string) {
    return [...this.devices.entries()].some(([wwn, d]) => d.majMin === mm && wwn.startsWith('5056432d4944'));
  }
  async blockDeviceExists(mm: string) {
    return [...this.devices.values()].some((d) => d.majMin === mm) && !this.gone.has(mm);
  }
  /** Devices whose first MiB holds data without a signature blkid knows. */
  dataOn = new Set<string>();
  async hasData(device: string) {
    return this.dataOn.has(device);
  }
}
