// ONC RPC v2 (RFC 5531) over one TCP connection with record marking, AUTH_SYS as root.
// Calls are multiplexed by XID on a connection that is opened on first use and re-opened after
// a drop. Every call is bounded by a deadline that covers connecting too, so a dead or
// unreachable server surfaces as Unavailable instead of a hang.
import net from 'node:net';
import os from 'node:os';
import type { Logger } from 'pino';
import { CsiError, DeadlineExceeded, FailedPrecondition, Internal, Unavailable } from '../../errors.js';
import { XdrReader, XdrWriter } from './xdr.js';

const MAX_RECORD = 4 << 20;
const LAST_FRAGMENT = 0x80000000;

export interface RpcConnectionOptions {
  host: string;
  port: number;
  /** Name used in error messages, e.g. "NFS" or "MOUNT". */
  label: string;
  timeoutMs: number;
  /**
   * Bind a source port below 1024 when the process may (root or CAP_NET_BIND_SERVICE). Servers
   * that only accept "secure" ports (a Synology default, Linux `secure` exports) need it;
   * without the privilege we fall back to an ephemeral port.
   */
  privilegedPort?: boolean | undefined;
  log?: Logger | undefined;
}

export interface RpcCall {
  prog: number;
  vers: number;
  proc: number;
  /** Procedure name for messages, e.g. "LOOKUP". */
  name: string;
  args?: Buffer | undefined;
  signal?: AbortSignal | undefined;
  timeoutMs?: number | undefined;
}

/** The connection went away with the call in flight: the call may or may not have run. */
class ConnectionDropped extends Unavailable {}

interface Pending {
  resolve: (r: XdrReader) => void;
  reject: (e: unknown) => void;
  sentAt: number;
}

class Link {
  readonly pending = new Map<number, Pending>();
  lastRx = 0;
  private rx: Buffer = Buffer.alloc(0);
  private frags: Buffer[] = [];
  private fragBytes = 0;

  constructor(
    readonly socket: net.Socket,
    private readonly onMessage: (link: Link, msg: Buffer) => void,
    private readonly onClose: (link: Link, why: string) => void,
  ) {
    socket.on('data', (d: Buffer) => this.data(d));
    socket.on('error', (e) => this.close(e.message));
    socket.on('close', () => this.close('connection closed by server'));
  }

  private data(d: Buffer): void {
    this.lastRx = Date.now();
    this.rx = this.rx.length ? Buffer.concat([this.rx, d]) : d;
    while (this.rx.length >= 4) {
      const hdr = this.rx.readUInt32BE(0);
      const len = hdr & 0x7fffffff;
      if (this.fragBytes + len > MAX_RECORD) {
        this.close(`RPC record larger than ${MAX_RECORD} bytes`);
        return;
      }
      if (this.rx.length < 4 + len) return;
      this.frags.push(this.rx.subarray(4, 4 + len));
      this.fragBytes += len;
      this.rx = this.rx.subarray(4 + len);
      if (hdr & LAST_FRAGMENT) {
        const [only] = this.frags;
        const msg = this.frags.length === 1 && only ? only : Buffer.concat(this.frags);
        this.frags = [];
        this.fragBytes = 0;
        this.onMessage(this, msg);
      }
    }
  }

  close(why: string): void {
    if (!this.socket.destroyed) this.socket.destroy();
    this.onClose(this, why);
  }
}

let xidSeq = (Math.random() * 0xffffffff) >>> 0;
// Once binding a reserved port was refused for lack of privilege, stop trying for this process.
let privilegedRefused = false;

function authSysCredential(): Buffer {
  const machine = os.hostname().slice(0, 255);
  return new XdrWriter()
    .u32(Math.floor(Date.now() / 1000))
    .string(machine)
    .u32(0) // uid root: the controller acts as the provisioner, like upstream's root mount
    .u32(0)
    .u32(0) // no supplementary groups
    .bytes();
}

export class RpcConnection {
  private link: Link | null = null;
  private connecting: Promise<Link> | null = null;
  private closed = false;
  private readonly cred = authSysCredential();

  constructor(private readonly opts: RpcConnectionOptions) {}

  get endpoint(): string {
    return `${this.opts.label} server ${this.opts.host}:${this.opts.port}`;
  }

  /** Sends one call and resolves with a reader positioned at the procedure's results. */
  async call(c: RpcCall): Promise<XdrReader> {
    const deadline = Date.now() + (c.timeoutMs ?? this.opts.timeoutMs);
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.once(c, deadline);
      } catch (e) {
        // A connection that dropped under the call is re-opened and the call sent once more; the
        // callers' operations are idempotent at their level (EXIST/NOENT are read as done).
        if (e instanceof ConnectionDropped && attempt === 0 && deadline - Date.now() > 5 && !this.closed) {
          this.opts.log?.debug({ endpoint: this.endpoint, proc: c.name }, 'RPC connection dropped, retrying once');
          continue;
        }
        throw e;
      }
    }
  }

  close(): void {
    this.closed = true;
    this.link?.close('client closed');
    this.link = null;
  }

  private once(c: RpcCall, deadline: number): Promise<XdrReader> {
    return new Promise<XdrReader>((resolve, reject) => {
      if (c.signal?.aborted) {
        reject(new DeadlineExceeded(`${c.name} to ${this.endpoint} cancelled`));
        return;
      }
      const xid = (xidSeq = (xidSeq + 1) >>> 0);
      let settled = false;
      let link: Link | null = null;
      const finish = (fn: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        c.signal?.removeEventListener('abort', onAbort);
        link?.pending.delete(xid);
        fn();
      };
      const ms = Math.max(0, deadline - Date.now());
      const timer = setTimeout(() => {
        const p = link?.pending.get(xid);
        finish(() =>
          reject(
            new Unavailable(
              `${this.endpoint} did not answer ${c.name} within ${c.timeoutMs ?? this.opts.timeoutMs} ms`,
            ),
          ),
        );
        // Nothing heard since the call went out: treat the connection as dead so the next call
        // reconnects instead of queueing behind a half-open socket.
        if (link && p && p.sentAt > 0 && link.lastRx < p.sentAt) link.close('no reply before the deadline');
      }, ms);
      const onAbort = () => finish(() => reject(new DeadlineExceeded(`${c.name} to ${this.endpoint} cancelled`)));
      c.signal?.addEventListener('abort', onAbort, { once: true });

      const pending: Pending = {
        resolve: (r) => finish(() => resolve(r)),
        reject: (e) => finish(() => reject(e)),
        sentAt: 0,
      };
      this.getLink().then(
        (l) => {
          if (settled) return;
          if (l.socket.destroyed) {
            pending.reject(new ConnectionDropped(`${this.endpoint}: connection closed`));
            return;
          }
          link = l;
          l.pending.set(xid, pending);
          pending.sentAt = Date.now();
          l.socket.write(this.frame(xid, c));
        },
        (e: unknown) => pending.reject(e),
      );
    });
  }

  private frame(xid: number, c: RpcCall): Buffer {
    const body = new XdrWriter()
      .u32(xid)
      .u32(0) // CALL
      .u32(2) // RPC version
      .u32(c.prog)
      .u32(c.vers)
      .u32(c.proc)
      .u32(1) // AUTH_SYS
      .opaque(this.cred)
      .u32(0) // verifier AUTH_NONE
      .u32(0)
      .bytes();
    const args = c.args ?? Buffer.alloc(0);
    const hdr = Buffer.allocUnsafe(4);
    hdr.writeUInt32BE((LAST_FRAGMENT | (body.length + args.length)) >>> 0);
    return Buffer.concat([hdr, body, args]);
  }

  private getLink(): Promise<Link> {
    if (this.closed) return Promise.reject(new Unavailable(`${this.endpoint}: client is closed`));
    if (this.link) return Promise.resolve(this.link);
    if (!this.connecting) {
      this.connecting = this.connect().then(
        (sock) => {
          this.connecting = null;
          const link = new Link(
            sock,
            (l, m) => this.dispatch(l, m),
            (l, why) => this.dropped(l, why),
          );
          if (this.closed) link.close('client closed');
          else this.link = link;
          return link;
        },
        (e: unknown) => {
          this.connecting = null;
          throw e;
        },
      );
    }
    return this.connecting;
  }

  private dropped(link: Link, why: string): void {
    if (this.link === link) this.link = null;
    const calls = [...link.pending.values()];
    link.pending.clear();
    if (calls.length)
      this.opts.log?.debug({ endpoint: this.endpoint, why, calls: calls.length }, 'RPC connection lost');
    for (const p of calls) p.reject(new ConnectionDropped(`${this.endpoint}: ${why}`));
  }

  private async connect(): Promise<net.Socket> {
    if (this.opts.privilegedPort && !privilegedRefused) {
      for (let i = 0; i < 8; i++) {
        try {
          return await this.connectFrom(512 + Math.floor(Math.random() * 512));
        } catch (e) {
          const code = (e as NodeJS.ErrnoException).code;
          if (code === 'EACCES' || code === 'EPERM') {
            privilegedRefused = true;
            this.opts.log?.info('no privilege to bind a reserved source port; using an ephemeral one');
            break;
          }
          if (code !== 'EADDRINUSE' && code !== 'EADDRNOTAVAIL') throw this.unreachable(e);
        }
      }
    }
    try {
      return await this.connectFrom(undefined);
    } catch (e) {
      throw this.unreachable(e);
    }
  }

  private unreachable(e: unknown): Error {
    if (e instanceof CsiError) return e;
    return new Unavailable(`cannot reach ${this.endpoint}: ${(e as Error).message}`, { cause: e });
  }

  private connectFrom(localPort: number | undefined): Promise<net.Socket> {
    return new Promise((resolve, reject) => {
      const sock = net.connect({ host: this.opts.host, port: this.opts.port, ...(localPort ? { localPort } : {}) });
      sock.unref(); // an idle connection must not keep the process alive; pending timers do
      const timer = setTimeout(() => {
        sock.destroy();
        reject(new Unavailable(`cannot reach ${this.endpoint}: no connection within ${this.opts.timeoutMs} ms`));
      }, this.opts.timeoutMs);
      timer.unref();
      const onError = (e: Error) => {
        clearTimeout(timer);
        sock.destroy();
        reject(e);
      };
      sock.once('error', onError);
      sock.once('connect', () => {
        clearTimeout(timer);
        sock.removeListener('error', onError);
        sock.setNoDelay(true);
        sock.setKeepAlive(true, 15_000);
        resolve(sock);
      });
    });
  }

  private dispatch(link: Link, msg: Buffer): void {
    const r = new XdrReader(msg);
    let xid: number;
    try {
      xid = r.u32();
      if (r.u32() !== 1) return; // not a REPLY; servers do not call us
    } catch {
      link.close('malformed RPC record');
      return;
    }
    const p = link.pending.get(xid);
    if (!p) return; // late reply to a call that already timed out
    try {
      this.checkReply(r);
      p.resolve(r);
    } catch (e) {
      p.reject(e);
    }
  }

  private checkReply(r: XdrReader): void {
    const ep = this.endpoint;
    if (r.u32() === 0) {
      r.u32(); // verifier flavor
      r.opaque(400);
      const st = r.u32();
      switch (st) {
        case 0:
          return;
        case 1:
          throw new FailedPrecondition(`${ep} does not serve this RPC program (PROG_UNAVAIL); is it the right port?`);
        case 2: {
          const lo = r.u32();
          const hi = r.u32();
          throw new FailedPrecondition(`${ep} supports program versions ${lo}..${hi} only; NFSv3/MOUNTv3 needed`);
        }
        case 3:
          throw new FailedPrecondition(`${ep} does not implement the procedure (PROC_UNAVAIL)`);
        case 4:
          throw new Internal(`${ep} could not decode our arguments (GARBAGE_ARGS)`);
        default:
          throw new Unavailable(`${ep} reported a system error (accept_stat ${st})`);
      }
    }
    const rej = r.u32();
    if (rej === 1) {
      const auth = r.u32();
      throw new FailedPrecondition(
        `${ep} rejected AUTH_SYS credentials (auth_stat ${auth}); the export must allow sec=sys` +
          (auth === 5 ? ' and connections from non-privileged ports' : ''),
      );
    }
    throw new FailedPrecondition(`${ep} rejected the call: RPC version mismatch`);
  }
}
