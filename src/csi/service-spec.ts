// What a CSI service is made of before the transport sees it: per RPC, the lock keys, the
// request check and the handler. The services (src/controller/service.ts, src/node/service.ts,
// identity-service.ts) return these; src/server/driver-server.ts wraps each in the one
// interceptor, so the services know nothing of gRPC beyond the generated handler types.
import type * as grpc from '@grpc/grpc-js';
import type { CallContext } from './types.js';

export interface RpcSpec<Req, Res> {
  /** Lock keys for this request; concurrent calls on a held key are refused with ABORTED. */
  keys?: (req: Req) => string[];
  validate?: (req: Req) => void;
  /** Undefined for an RPC the backend does not offer: the interceptor answers UNIMPLEMENTED. */
  impl: ((req: Req, ctx: CallContext) => Promise<Res>) | undefined;
}

/** A service's RPCs by method name (the generated handler type's methods, not its index signature). */
export type ServiceSpecs<H> = {
  [K in keyof H as string extends K ? never : K]: H[K] extends grpc.handleUnaryCall<infer Req, infer Res>
    ? RpcSpec<Req, Res>
    : never;
};
