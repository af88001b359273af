// Runs commands inside the VM-tier guest through QEMU's guest agent (qemu-ga), which the
// guest starts on a virtio-serial port. QEMU serves that port's host side as a unix socket that
// takes one client at a time and queues (or refuses) the rest, and a client may find answers
// meant for an earlier one in the pipe; so every call opens its own connection, retries the
// connect, and resynchronises with guest-sync-delimited before it trusts any answer.
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface ExecOptions {
  /** Bytes fed to the command's stdin. */
  input?: string | Buffer;
  /** Extra environment, as NAME=value entries, on top of the agent's own. */
  env?: string[];
  /** Whole call, connect included. Default 60 s. */
  timeoutMs?: number;
}

export interface ExecResult {
  code: number | null;
  signal: number | null;
  stdout: Buffer;
  stderr: Buffer;
  truncated: boolean;
}

export class QgaError extends Error {
  override name = 'QgaError';
}

const SYNC_MARK = 0xff;

class Connection {
  private buf = Buffer.alloc(0);
  private waiter: (() => void) | undefined;
  private closed: Error | undefined;

  private constructor(private readonly sock: net.Socket) {
    sock.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.wake();
    });
    sock.on('error', (e) => this.fail(e));
    sock.on('close', () => this.fail(new QgaError('guest agent socket closed')));
  }

  static async open(path: string, deadline: number): Promise<Connection> {
    for (let delay = 20; ; delay = Math.min(delay * 2, 250)) {
      try {
        return new Connection(await connectOnce(path));
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        // EAGAIN: QEMU's listen backlog is full because another client holds the agent.
        // (ENOENT is not retried: QEMU creates the socket before the guest even boots.)
        if (code !== 'EAGAIN' && code !== 'ECONNREFUSED') throw e;
        if (Date.now() + delay > deadline) {
          throw new QgaError(`guest agent at ${path} not reachable (${code}) before the deadline`);
        }
        await sleep(delay);
      }
    }
  }

  private fail(e: Error): void {
    this.closed ??= e;
    this.wake();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  private async more(deadline: number): Promise<void> {
    if (this.closed) throw this.closed;
    const left = deadline - Date.now();
    if (left <= 0) throw new QgaError('guest agent did not answer before the deadline');
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      this.waiter = resolve;
      timer = setTimeout(resolve, left);
    });
    clearTimeout(timer);
  }

  /** Drops everything up to the agent's 0xFF sync mark, then waits for our sync id. */
  async sync(deadline: number): Promise<void> {
    const id = Math.floor(Math.random() * 2 ** 31);
    this.buf = Buffer.alloc(0);
    this.sock.write(JSON.stringify({ execute: 'guest-sync-delimited', arguments: { id } }) + '\n');
    for (;;) {
      const mark = this.buf.lastIndexOf(SYNC_MARK);
      if (mark >= 0) {
        this.buf = this.buf.subarray(mark + 1);
        const line = this.takeLine();
        if (line !== undefined) {
          const msg = parse(line);
          if (msg && msg.return === id) return;
          continue;
        }
      }
      await this.more(deadline);
    }
  }

  async call(execute: string, args: object, deadline: number): Promise<unknown> {
    this.sock.write(JSON.stringify({ execute, arguments: args }) + '\n');
    for (;;) {
      const line = this.takeLine();
      if (line === undefined) {
        await this.more(deadline);
        continue;
      }
      const msg = parse(line);
      if (!msg) continue;
      if (msg.error) {
        const err = msg.error as { class?: string; desc?: string };
        throw new QgaError(`guest agent ${execute}: ${err.desc ?? JSON.stringify(err)}`);
      }
      if ('return' in msg) return msg.return;
    }
  }

  private takeLine(): string | undefined {
    const nl = this.buf.indexOf(0x0a);
    if (nl < 0) return undefined;
    const line = this.buf.subarray(0, nl).toString('utf8').trim();
    this.buf = this.buf.subarray(nl + 1);
    return line;
  }

  close(): void {
    this.sock.destroy();
  }
}

function parse(line: string): Record<string, unknown> | undefined {
  if (!line.startsWith('{')) return undefined;
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

function connectOnce(path: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(path);
    s.once('connect', () => {
      s.removeListener('error', reject);
      resolve(s);
    });
    s.once('error', reject);
  });
}

interface StatusReturn {
  exited: boolean;
  exitcode?: number;
  signal?: number;
  'out-data'?: string;
  'err-data'?: string;
  'out-truncated'?: boolean;
  'err-truncated'?: boolean;
}

/** Runs argv[0] (searched in the guest's PATH) with the rest as arguments, as root. */
export async function guestExec(socketPath: string, argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
  if (argv.length === 0) throw new QgaError('guestExec needs a command');
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  const conn = await Connection.open(socketPath, deadline);
  try {
    await conn.sync(deadline);
    const args: Record<string, unknown> = { path: argv[0], arg: argv.slice(1), 'capture-output': true };
    if (opts.input !== undefined) args['input-data'] = Buffer.from(opts.input).toString('base64');
    if (opts.env) args.env = opts.env;
    const started = (await conn.call('guest-exec', args, deadline)) as { pid: number };
    for (let delay = 10; ; delay = Math.min(delay * 2, 200)) {
      const st = (await conn.call('guest-exec-status', { pid: started.pid }, deadline)) as StatusReturn;
      if (st.exited) {
        return {
          code: st.exitcode ?? null,
          signal: st.signal ?? null,
          stdout: Buffer.from(st['out-data'] ?? '', 'base64'),
          stderr: Buffer.from(st['err-data'] ?? '', 'base64'),
          truncated: Boolean(st['out-truncated'] || st['err-truncated']),
        };
      }
      if (Date.now() + delay > deadline) {
        throw new QgaError(`guest command ${JSON.stringify(argv)} (pid ${started.pid}) still running at the deadline`);
      }
      await sleep(delay);
    }
  } finally {
    conn.close();
  }
}

/** True once the agent answers a sync; used to wait for the guest. */
export async function guestAgentAlive(socketPath: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  try {
    const conn = await Connection.open(socketPath, deadline);
    try {
      await conn.sync(deadline);
      return true;
    } finally {
      conn.close();
    }
  } catch {
    return false;
  }
}
