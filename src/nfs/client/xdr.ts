// XDR (RFC 4506) encoding for the few types ONC RPC, MOUNT v3 and NFSv3 use. Big-endian,
// everything padded to 4 bytes. 64-bit values are bigint so cookies and file ids round-trip
// exactly; sizes are converted to number by the callers that need arithmetic.
import { Internal } from '../../errors.js';

export class XdrWriter {
  private buf = Buffer.allocUnsafe(256);
  private len = 0;

  private grow(n: number): void {
    if (this.len + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.len + n));
    this.buf.copy(next, 0, 0, this.len);
    this.buf = next;
  }

  u32(v: number): this {
    this.grow(4);
    this.buf.writeUInt32BE(v >>> 0, this.len);
    this.len += 4;
    return this;
  }

  u64(v: bigint | number): this {
    this.grow(8);
    this.buf.writeBigUInt64BE(BigInt(v), this.len);
    this.len += 8;
    return this;
  }

  bool(v: boolean): this {
    return this.u32(v ? 1 : 0);
  }

  /** Fixed-length opaque: no length prefix, padded. */
  fixed(data: Uint8Array): this {
    const pad = (4 - (data.length % 4)) % 4;
    this.grow(data.length + pad);
    this.buf.set(data, this.len);
    this.buf.fill(0, this.len + data.length, this.len + data.length + pad);
    this.len += data.length + pad;
    return this;
  }

  opaque(data: Uint8Array): this {
    return this.u32(data.length).fixed(data);
  }

  string(s: string): this {
    return this.opaque(Buffer.from(s, 'utf8'));
  }

  bytes(): Buffer {
    return this.buf.subarray(0, this.len);
  }
}

/** Thrown when a reply is shorter or stranger than its type says: the peer is not what we expect. */
export class XdrError extends Internal {}

export class XdrReader {
  private off = 0;
  constructor(private readonly buf: Buffer) {}

  private need(n: number): void {
    if (this.off + n > this.buf.length) {
      throw new XdrError(
        `malformed RPC reply: needed ${n} bytes at offset ${this.off}, message has ${this.buf.length}`,
      );
    }
  }

  u32(): number {
    this.need(4);
    const v = this.buf.readUInt32BE(this.off);
    this.off += 4;
    return v;
  }

  u64(): bigint {
    this.need(8);
    const v = this.buf.readBigUInt64BE(this.off);
    this.off += 8;
    return v;
  }

  /** A u64 that the caller does arithmetic on (sizes, byte counts); exact up to 2^53. */
  u64n(): number {
    return Number(this.u64());
  }

  bool(): boolean {
    const v = this.u32();
    if (v > 1) throw new XdrError(`malformed RPC reply: boolean value ${v}`);
    return v === 1;
  }

  fixed(n: number): Buffer {
    const pad = (4 - (n % 4)) % 4;
    this.need(n + pad);
    const out = Buffer.from(this.buf.subarray(this.off, this.off + n));
    this.off += n + pad;
    return out;
  }

  opaque(max = 1 << 24): Buffer {
    const n = this.u32();
    if (n > max) throw new XdrError(`malformed RPC reply: opaque of ${n} bytes exceeds ${max}`);
    return this.fixed(n);
  }

  string(max = 1 << 16): string {
    return this.opaque(max).toString('utf8');
  }

  get remaining(): number {
    return this.buf.length - this.off;
  }
}
