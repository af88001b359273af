// A minimal QMP client for the VM tier's own needs (the smoke test's hot-plug, the harness's
// `quit`). QMP answers in order, so one FIFO of pending calls suffices; events are collected.
import net from 'node:net';

export class QmpError extends Error {
  override name = 'QmpError';
}

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown> | undefined;
}

type Pending = { resolve: (v: unknown) => void; reject: (e: Error) => void; what: string };

export class Qmp {
  private buf = '';
  private readonly pending: Pending[] = [];
  private readonly eventWaiters: { match: (e: QmpEvent) => boolean; resolve: (e: QmpEvent) => void }[] = [];
  readonly events: QmpEvent[] = [];
  private closedWith: Error | undefined;

  private constructor(private readonly sock: net.Socket) {
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => this.onData(d));
    sock.on('error', (e) => this.onClose(e));
    sock.on('close', () => this.onClose(new QmpError('QMP socket closed')));
  }

  /** Connects and negotiates capabilities. */
  static async connect(path: string, timeoutMs = 10_000): Promise<Qmp> {
    const sock = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect(path);
      const timer = setTimeout(() => {
        s.destroy();
        reject(new QmpError(`QMP ${path}: connect timed out`));
      }, timeoutMs);
      s.once('connect', () => {
        clearTimeout(timer);
        s.removeListener('error', reject);
        resolve(s);
      });
      s.once('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
    });
    const qmp = new Qmp(sock);
    // The greeting arrives unasked; it is dropped in onData, so the first answer is ours.
    await qmp.execute('qmp_capabilities');
    return qmp;
  }

  private onData(d: string): void {
    this.buf += d;
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl).trim();
      this.buf = this.buf.slice(nl + 1);
      if (!line) continue;
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      if ('QMP' in msg) continue;
      if (typeof msg.event === 'string') {
        const ev = { event: msg.event, data: msg.data as Record<string, unknown> | undefined };
        this.events.push(ev);
        // Every waiter this event satisfies is dropped and resolved; the others keep waiting.
        for (const w of this.eventWaiters.filter((x) => x.match(ev))) {
          this.eventWaiters.splice(this.eventWaiters.indexOf(w), 1);
          w.resolve(ev);
        }
        continue;
      }
      const p = this.pending.shift();
      if (!p) continue;
      if (msg.error) {
        const err = msg.error as { class?: string; desc?: string };
        p.reject(new QmpError(`QMP ${p.what}: ${err.class ?? 'Error'}: ${err.desc ?? ''}`));
      } else {
        p.resolve(msg.return);
      }
    }
  }

  private onClose(e: Error): void {
    this.closedWith ??= e;
    for (const p of this.pending.splice(0)) p.reject(e);
  }

  execute(command: string, args?: Record<string, unknown>): Promise<unknown> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject, what: command });
      this.sock.write(JSON.stringify(args ? { execute: command, arguments: args } : { execute: command }) + '\n');
    });
  }

  /** Resolves with the first matching event, including one already received. */
  waitEvent(match: (e: QmpEvent) => boolean, timeoutMs: number): Promise<QmpEvent> {
    const seen = this.events.find(match);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const i = this.eventWaiters.indexOf(w);
        if (i >= 0) this.eventWaiters.splice(i, 1);
        reject(new QmpError(`no matching QMP event within ${timeoutMs} ms`));
      }, timeoutMs);
      const w = {
        match,
        resolve: (e: QmpEvent) => {
          clearTimeout(timer);
          resolve(e);
        },
      };
      this.eventWaiters.push(w);
    });
  }

  close(): void {
    this.sock.destroy();
  }
}
