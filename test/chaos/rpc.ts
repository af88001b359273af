// CSI calls the way the Kubernetes sidecars make them: one deadline per call, and the same
// request again with exponential backoff while the answer says the operation may still be in
// progress. The transient codes are the ones external-provisioner/attacher/resizer treat as
// "not final" (isFinalError): CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, RESOURCE_EXHAUSTED,
// ABORTED. Every answer is recorded for the scenario's table.
import * as grpc from '@grpc/grpc-js';
import { csiGrpc } from '../../src/server/proto.js';

export const TRANSIENT = new Set(['CANCELLED', 'DEADLINE_EXCEEDED', 'UNAVAILABLE', 'RESOURCE_EXHAUSTED', 'ABORTED']);
export const codeName = (code: number): string => grpc.status[code] ?? `CODE_${code}`;

export type Service = 'identity' | 'controller' | 'node';

export interface Answer {
  code: string;
  message: string;
  /** The decoded response (a protobufjs plain object) of an OK answer; read it with `field`. */
  res?: unknown;
  ms: number;
}

/** A field of a decoded response by its path; undefined where any step of it is absent. */
export function field(value: unknown, ...path: string[]): unknown {
  let v = value;
  for (const k of path) v = typeof v === 'object' && v !== null ? (v as Record<string, unknown>)[k] : undefined;
  return v;
}

/** The volume id of an OK CreateVolume answer. */
export function volumeIdOf(a: Answer): string {
  const id = field(a.res, 'volume', 'volumeId');
  if (typeof id !== 'string') throw new Error(`CreateVolume answer without a volume id: ${JSON.stringify(a.res)}`);
  return id;
}

/** What one scenario saw; the table is printed from these. */
export class Recorder {
  ops = 0;
  calls = 0;
  codes: Record<string, number> = {};
  longestMs = 0;
  longestWhat = '';
  faults: Record<string, number> = {};
  violations: string[] = [];
  leaks: Record<string, number> = {};
  doubleAttaches = 0;
  /** Calls sent and not answered yet. */
  inflight = 0;

  constructor(readonly scenario: string) {}

  answer(what: string, a: Answer, deadlineMs: number, expectDeadline = false): void {
    this.calls++;
    this.codes[a.code] = (this.codes[a.code] ?? 0) + 1;
    if (a.ms > this.longestMs) {
      this.longestMs = a.ms;
      this.longestWhat = what;
    }
    if (a.code === 'INTERNAL' || a.code === 'UNKNOWN') this.violate(`${what}: ${a.code} ${a.message}`);
    // A caller that set a short deadline on purpose expects to give up; every other call must be
    // answered by the driver before its deadline.
    if (!expectDeadline && a.code === 'DEADLINE_EXCEEDED' && a.ms >= deadlineMs - 5) {
      this.violate(`${what}: not answered within its ${deadlineMs} ms deadline`);
    }
  }

  fault(kind: string, n = 1): void {
    if (n > 0) this.faults[kind] = (this.faults[kind] ?? 0) + n;
  }

  violate(msg: string): void {
    this.violations.push(msg);
  }
}

export interface CallOptions {
  deadlineMs?: number;
  /** `final`: stop at the first non-transient answer (a sidecar's view); `ok`: keep retrying
   *  every error until OK, as the attacher does for detaches and the PV controller for deletes. */
  until?: 'final' | 'ok' | 'once';
  /** Give up (a violation) after this long without the wanted answer. */
  budgetMs?: number;
  backoffStartMs?: number;
  backoffMaxMs?: number;
  /** The deadline is short on purpose; DEADLINE_EXCEEDED is what the caller expects. */
  expectDeadline?: boolean;
  /** Cancel the call after this long (a caller that gives up without a deadline). */
  cancelAfterMs?: number;
}

type Unary = (
  req: unknown,
  md: grpc.Metadata,
  opts: grpc.CallOptions,
  cb: (e: grpc.ServiceError | null, r: unknown) => void,
) => grpc.ClientUnaryCall;

export class CsiCaller {
  private clients: Record<Service, grpc.Client>;

  constructor(
    readonly endpoint: string,
    private readonly rec: Recorder,
  ) {
    const pkg = csiGrpc().csi.v1;
    const creds = grpc.credentials.createInsecure();
    // Large requests are part of the bad-input table; the driver must refuse them, not the client.
    // A restarted controller is found again quickly (grpc-js would back off up to 120 s).
    const o = {
      'grpc.max_send_message_length': 16 << 20,
      'grpc.max_receive_message_length': 16 << 20,
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': 1000,
    };
    this.clients = {
      identity: new pkg.Identity(endpoint, creds, o),
      controller: new pkg.Controller(endpoint, creds, o),
      node: new pkg.Node(endpoint, creds, o),
    };
  }

  close(): void {
    for (const c of Object.values(this.clients)) c.close();
  }

  /** One attempt, recorded. */
  once(svc: Service, method: string, req: object, o: CallOptions = {}): Promise<Answer> {
    const deadlineMs = o.deadlineMs ?? 10_000;
    const started = Date.now();
    this.rec.inflight++;
    return new Promise<Answer>((resolve) => {
      const fn = (this.clients[svc] as unknown as Record<string, Unary>)[method];
      if (!fn) throw new Error(`no method ${svc}.${method}`);
      const call = fn.call(
        this.clients[svc],
        req,
        new grpc.Metadata(),
        { deadline: new Date(started + deadlineMs) },
        (err, res) => {
          const a: Answer = err
            ? { code: codeName(err.code), message: err.details, ms: Date.now() - started }
            : { code: 'OK', message: '', res, ms: Date.now() - started };
          this.rec.inflight--;
          this.rec.answer(method, a, deadlineMs, o.expectDeadline || o.cancelAfterMs !== undefined);
          resolve(a);
        },
      );
      if (o.cancelAfterMs !== undefined) setTimeout(() => call.cancel(), o.cancelAfterMs);
    });
  }

  /** One operation: attempts with backoff until the answer `until` asks for; counts as one op. */
  async op(svc: Service, method: string, req: object, o: CallOptions = {}): Promise<Answer> {
    this.rec.ops++;
    const until = o.until ?? 'final';
    const budget = o.budgetMs ?? 90_000;
    const started = Date.now();
    let delay = o.backoffStartMs ?? 100;
    for (;;) {
      const a = await this.once(svc, method, req, o);
      if (until === 'once' || a.code === 'OK') return a;
      if (until === 'final' && !TRANSIENT.has(a.code)) return a;
      if (Date.now() - started + delay > budget) {
        this.rec.violate(
          `${method} ${JSON.stringify(req).slice(0, 160)}: no ${until === 'ok' ? 'success' : 'final answer'} within ${budget} ms (last: ${a.code} ${a.message.slice(0, 200)})`,
        );
        return a;
      }
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, o.backoffMaxMs ?? 2_000);
    }
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Waits until a fault's planned moment, or less: until the batch's first answer came back (fewer
 * than `batch` calls in flight). A fixed delay alone lets a faster program answer the whole batch
 * first, and the fault then tests nothing (chaos NFS hit 0 of 6 creates; the detach storm's kill
 * at 80 ms cut no call once Unpublish took two 25 ms calls). Call it after the batch was sent.
 */
export async function strikeAt(rec: Recorder, ms: number, batch: number): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until && rec.inflight >= batch) await new Promise((r) => setImmediate(r));
}

/** Runs `fn` over `items` with at most `n` at a time. */
export async function pool<T, R>(items: T[], n: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      for (let i = next++; i < items.length; i = next++) out[i] = await fn(items[i] as T, i);
    }),
  );
  return out;
}
