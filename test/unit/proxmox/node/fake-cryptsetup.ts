// An in-memory Cryptsetup over FakeDisks: format writes a "header" (the probe becomes
// crypto_LUKS and remembers the passphrase), open adds the mapping as a disk of its own, close
// removes it. It records each call's argv-free shape and every passphrase it was handed, so a
// test can check where the passphrase went.
import { type CryptMapping, type Cryptsetup, LuksBusy, LuksKeyRejected } from '../../../../src/os/cryptsetup.js';
import type { FakeDisks } from './fake-disks.js';

interface Mapping {
  device: string;
  majMin: string;
  backing: string;
  inUse: boolean;
}

export class FakeCryptsetup implements Cryptsetup {
  readonly calls: string[] = [];
  readonly keys = new Map<string, string>(); // device → passphrase of its header
  readonly mappings = new Map<string, Mapping>();
  readonly resizes: Array<[string, string | undefined]> = [];
  /** Throw this (once) from the named operation, e.g. to play a crash between steps. */
  failNext: Partial<Record<'format' | 'open' | 'close' | 'resize', Error | undefined>> = {};
  private minor = 0;

  constructor(private readonly disks: FakeDisks) {}

  private trip(op: 'format' | 'open' | 'close' | 'resize') {
    const e = this.failNext[op];
    if (e) {
      this.failNext[op] = undefined;
      throw e;
    }
  }

  private view(name: string, m: Mapping): CryptMapping {
    const backing = this.disks.byDevice(m.backing);
    return {
      name,
      device: m.device,
      majMin: m.majMin,
      backing: backing ? [backing.majMin] : [],
      backingNames: backing ? [m.backing.slice(m.backing.lastIndexOf('/') + 1)] : [],
      inUse: m.inUse,
    };
  }

  async format(device: string, passphrase: string) {
    this.calls.push(`format ${device}`);
    this.trip('format');
    const d = this.disks.diskAt(device);
    const interrupted = d.probe.fsType === 'crypto_LUKS' && !this.keys.has(device);
    if ((d.probe.fsType || d.probe.ptType) && !interrupted)
      throw new Error(`test bug: luksFormat over ${JSON.stringify(d.probe)} on ${device}`);
    d.probe = { fsType: 'crypto_LUKS' };
    this.keys.set(device, passphrase);
  }

  async open(device: string, name: string, passphrase: string) {
    this.calls.push(`open ${device} ${name}`);
    this.trip('open');
    if (!this.keys.has(device))
      throw new Error('cryptsetup open failed with exit code 1: No usable keyslot is available.');
    if (this.keys.get(device) !== passphrase)
      throw new LuksKeyRejected(device, 'No key available with this passphrase.');
    if (this.mappings.has(name)) throw new LuksBusy(`Device ${name} already exists.`);
    const majMin = `254:${this.minor++}`;
    const dev = `/dev/mapper/${name}`;
    const mapping = { device: dev, majMin, backing: device, inUse: false };
    this.mappings.set(name, mapping);
    // The mapping is a disk of its own to the BlockDevices port (probe, format, size).
    this.disks.add(
      `mapper-${name}`,
      dev,
      majMin,
      { ...this.inner.get(device) },
      this.disks.diskAt(device).size - (16 << 20),
    );
    this.spans.delete(name);
    return this.view(name, mapping);
  }

  async close(name: string) {
    this.calls.push(`close ${name}`);
    this.trip('close');
    const m = this.mappings.get(name);
    if (!m) return;
    if (m.inUse) throw new LuksBusy(`Device ${name} is still in use.`);
    this.mappings.delete(name);
    // The filesystem stays on the mapping's data; remember it for the next open.
    const disk = this.disks.disk(`mapper-${name}`);
    this.disks.devices.delete(`mapper-${name}`);
    this.inner.set(m.backing, disk.probe);
  }

  /** What the decrypted content of a device held when its mapping was closed. */
  readonly inner = new Map<string, { fsType?: string }>();

  async resize(name: string, passphrase?: string) {
    this.calls.push(`resize ${name}`);
    this.trip('resize');
    const m = this.mappings.get(name);
    if (!m) throw new Error(`test bug: resize of ${name}, which is not open`);
    if (passphrase === undefined) throw new LuksKeyRejected(name, 'No key available with this passphrase.');
    if (this.keys.get(m.backing) !== passphrase)
      throw new LuksKeyRejected(name, 'No key available with this passphrase.');
    this.resizes.push([name, passphrase]);
    this.spans.delete(name);
  }

  async span(name: string) {
    const m = this.mappings.get(name);
    if (!m) return undefined;
    return { offset: 16 << 20, size: this.spans.get(name) ?? this.disks.diskAt(m.backing).size - (16 << 20) };
  }

  /** Mapping sizes that differ from "the whole disk" (the disk grew after open). */
  readonly spans = new Map<string, number>();

  async keyslots(device: string) {
    const d = this.disks.byDevice(device);
    if (d?.probe.fsType !== 'crypto_LUKS') return undefined;
    return this.keys.has(device) ? 1 : 0;
  }

  async holdersOf(device: string) {
    return [...this.mappings.entries()].filter(([, m]) => m.backing === device).map(([n, m]) => this.view(n, m));
  }

  async byName(name: string) {
    const m = this.mappings.get(name);
    return m && this.view(name, m);
  }

  async byMajMin(majMin: string) {
    const hit = [...this.mappings.entries()].find(([, m]) => m.majMin === majMin);
    return hit && this.view(...hit);
  }
}
