// A backend's handlers are plain functions that take their dependencies first (easy to test one
// by one); the backend object binds them to its dependencies once, here, instead of writing
// `(req, ctx) => f(deps, req, ctx)` for every RPC.
import type { CallContext } from './types.js';

type Handler<D> = (deps: D, req: never, ctx: CallContext) => Promise<unknown>;

export type Bound<D, T> = {
  [K in keyof T]: T[K] extends (deps: D, req: infer Req, ctx: CallContext) => Promise<infer Res>
    ? (req: Req, ctx: CallContext) => Promise<Res>
    : never;
};

/**
 * The handler of backend method `K` of `B` (ControllerBackend, NodeBackend) that takes its
 * dependencies `D` first: its request and response types come from the backend's contract.
 */
export type HandlerOf<D, B, K extends keyof B> =
  NonNullable<B[K]> extends (req: infer Req, ctx: CallContext) => Promise<infer Res>
    ? (deps: D, req: Req, ctx: CallContext) => Promise<Res>
    : never;

/** `{ f, g }` → `{ f: (req, ctx) => f(deps, req, ctx), g: … }`. */
export function bindHandlers<D, T extends Record<string, Handler<D>>>(deps: D, handlers: T): Bound<D, T> {
  const out: Record<string, (req: never, ctx: CallContext) => Promise<unknown>> = {};
  for (const [name, f] of Object.entries(handlers)) out[name] = (req, ctx) => f(deps, req, ctx);
  return out as Bound<D, T>;
}
