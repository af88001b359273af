// A promise-based CSI client over the generated service definitions, for tests, the demo and
// benchmarks: `await client.controller('CreateVolume', {...})`.
import * as grpc from '@grpc/grpc-js';
import { csiGrpc } from '../../src/server/proto.js';

type Unary = (req: unknown, cb: (err: grpc.ServiceError | null, res: unknown) => void) => void;

export interface CsiClient {
  identity<T = any>(method: string, req?: object): Promise<T>;
  controller<T = any>(method: string, req?: object): Promise<T>;
  node<T = any>(method: string, req?: object): Promise<T>;
  close(): void;
}

/** endpoint: `unix:///path`, `tcp://127.0.0.1:PORT` or a gRPC target such as `dns:///127.0.0.1:PORT`. */
export function csiClient(endpoint: string, timeoutMs = 30_000): CsiClient {
  const target = endpoint.startsWith('tcp://') ? endpoint.slice('tcp://'.length) : endpoint;
  const pkg = csiGrpc().csi.v1;
  const creds = grpc.credentials.createInsecure();
  const clients = {
    identity: new pkg.Identity(target, creds),
    controller: new pkg.Controller(target, creds),
    node: new pkg.Node(target, creds),
  };
  const call = (c: grpc.Client) => (method: string, req: object = {}) =>
    new Promise<any>((resolve, reject) => {
      const fn = (c as unknown as Record<string, Unary>)[method];
      if (!fn) return reject(new Error(`no method ${method}`));
      const deadline = new Date(Date.now() + timeoutMs);
      (fn as unknown as (r: unknown, m: grpc.Metadata, o: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: unknown) => void) => void)
        .call(c, req, new grpc.Metadata(), { deadline }, (err, res) => (err ? reject(err) : resolve(res)));
    });
  return {
    identity: call(clients.identity),
    controller: call(clients.controller),
    node: call(clients.node),
    close: () => Object.values(clients).forEach((c) => c.close()),
  };
}
