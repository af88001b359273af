// The one wrapper every RPC goes through: request validation, keyed locks, the per-call log line
// (secrets redacted), metrics, cancellation, and typed error → gRPC status mapping.
import type * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { CallContext } from '../csi/types.js';
import type { RpcSpec, ServiceSpecs } from '../csi/service-spec.js';
import { Unimplemented } from '../errors.js';
import type { KeyedLock } from '../locks.js';
import type { Metrics } from './metrics.js';
import { codeName, mapError, toServiceError } from './status.js';
import { redact } from './redact.js';
import { checkLimits } from './limits.js';

export interface CallEnv {
  driver: string;
  log: Logger;
  locks: KeyedLock;
  metrics?: Metrics;
  /** Counts calls in flight so shutdown can report what it waits for. */
  inflight: { n: number };
}

/** One RPC as the interceptor runs it: its spec and the names its log line and metrics use. */
export interface CallSpec<Req, Res> extends RpcSpec<Req, Res> {
  method: string;
  requestType: string;
}

/** unary() for every RPC of a service; each request's message type is `<method>Request`. */
export function service<H>(env: CallEnv, specs: ServiceSpecs<H>): H {
  const out: Record<string, grpc.handleUnaryCall<unknown, unknown>> = {};
  const rpcs: Record<string, RpcSpec<unknown, unknown>> = specs;
  for (const [method, spec] of Object.entries(rpcs))
    out[method] = unary(env, { method, requestType: `${method}Request`, ...spec });
  return out as H;
}

/** An id for the log line; a hostile megabyte-long one is cut so each line stays a line. */
const field = (req: unknown, name: string): string | undefined => {
  const v = (req as Record<string, unknown> | null)?.[name];
  if (typeof v !== 'string' || v === '') return undefined;
  return v.length > 256 ? `${v.slice(0, 256)}… (${v.length} characters)` : v;
};

export function unary<Req, Res>(env: CallEnv, spec: CallSpec<Req, Res>): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    const started = process.hrtime.bigint();
    const req = call.request;
    const volumeId = field(req, 'volumeId') ?? field(req, 'name');
    const nodeId = field(req, 'nodeId');
    const log = env.log.child({ method: spec.method, ...(volumeId && { volumeId }), ...(nodeId && { nodeId }) });
    const ac = new AbortController();
    call.on('cancelled', () => ac.abort(new Error('call cancelled by client')));
    const deadline = call.getDeadline();
    let deadlineMs: number | undefined;
    // Cleared in finish(): an armed timer's closure holds the whole call (request, stream, logger)
    // until the deadline, minutes after the answer went out.
    let deadlineTimer: NodeJS.Timeout | undefined;
    if (deadline instanceof Date || (typeof deadline === 'number' && Number.isFinite(deadline))) {
      deadlineMs = new Date(deadline).getTime();
      const ms = deadlineMs - Date.now();
      if (ms > 0 && ms < 2 ** 31)
        deadlineTimer = setTimeout(() => ac.abort(new Error('deadline exceeded')), ms).unref();
      else if (ms >= 2 ** 31) deadlineMs = undefined;
    }
    if (log.isLevelEnabled('debug')) log.debug({ request: redact(spec.requestType, req) }, 'request');

    env.inflight.n++;
    const run = async (): Promise<Res> => {
      checkLimits(req, spec.method);
      spec.validate?.(req);
      const impl = spec.impl;
      if (!impl) throw new Unimplemented(`${spec.method} is not supported by ${env.driver}`);
      const ctx: CallContext = { log, signal: ac.signal, ...(deadlineMs !== undefined && { deadline: deadlineMs }) };
      const keys = spec.keys?.(req) ?? [];
      return keys.length > 0
        ? env.locks.tryRun(
            keys.map((k) => `${env.driver}/${k}`),
            () => impl(req, ctx),
          )
        : impl(req, ctx);
    };
    run().then(
      (res) => {
        finish('OK');
        callback(null, res);
      },
      (err: unknown) => {
        const mapped = mapError(err);
        const code = codeName(mapped.code);
        if (mapped.unexpected)
          log.error(
            { err: mapped.logged ?? err, ...(mapped.logged !== err && { wrappedAs: mapped.message }) },
            'unexpected error',
          );
        finish(code, mapped.message);
        callback(toServiceError(mapped));
      },
    );

    function finish(code: string, message?: string): void {
      clearTimeout(deadlineTimer);
      env.inflight.n--;
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      env.metrics?.observe(env.driver, spec.method, code, seconds);
      const line = { code, durationMs: Math.round(seconds * 1000 * 10) / 10, ...(message && { error: message }) };
      if (code === 'OK') log.info(line, 'done');
      else log.warn(line, 'failed');
    }
  };
}
