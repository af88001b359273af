// A promise-based CSI client for tests, the demo and benchmarks, typed from the generated
// service definitions in src/gen (npm run gen): `await client.controller.CreateVolume({...})`
// takes the method's request type and resolves to its response type, so a misspelt method, a
// wrong field or a field read that the response does not have is a compile error.
import * as grpc from '@grpc/grpc-js';
import type { MethodDefinition } from '@grpc/proto-loader';
import type { ControllerDefinition } from '../../src/gen/csi/v1/Controller.js';
import type { IdentityDefinition } from '../../src/gen/csi/v1/Identity.js';
import type { NodeDefinition } from '../../src/gen/csi/v1/Node.js';
import { csiGrpc } from '../../src/server/proto.js';

// Request-side message types, for tests that build requests ahead of the call.
export type { VolumeCapability } from '../../src/gen/csi/v1/VolumeCapability.js';
/** A volume as CreateVolume returns it (id, context, topology). */
export type { Volume__Output as CreatedVolume } from '../../src/gen/csi/v1/Volume.js';

/** Per-call options; the client's own timeout applies when no deadline is given. */
export interface CallOptions {
  timeoutMs?: number | undefined;
  metadata?: grpc.Metadata | undefined;
}

/** One promise-returning method per RPC of a generated service definition. */
export type Rpcs<D> = {
  [M in keyof D]: D[M] extends MethodDefinition<object, object, object, object>
    ? (
        req?: Parameters<D[M]['requestSerialize']>[0],
        o?: CallOptions,
      ) => Promise<ReturnType<D[M]['responseDeserialize']>>
    : never;
};

export interface CsiClient {
  identity: Rpcs<IdentityDefinition>;
  controller: Rpcs<ControllerDefinition>;
  node: Rpcs<NodeDefinition>;
  /**
   * Any RPC by service and method name with an unchecked request, for table-driven tests that
   * walk every RPC with hostile field values; everything else uses the typed methods.
   */
  raw(service: 'identity' | 'controller' | 'node', method: string, req: object): Promise<unknown>;
  close(): void;
}

type UnaryFn = (
  req: unknown,
  md: grpc.Metadata,
  o: grpc.CallOptions,
  cb: (err: grpc.ServiceError | null, res?: unknown) => void,
) => grpc.ClientUnaryCall;

/** endpoint: `unix:///path`, `tcp://127.0.0.1:PORT` or a gRPC target such as `dns:///127.0.0.1:PORT`. */
export function csiClient(endpoint: string, timeoutMs = 30_000): CsiClient {
  const target = endpoint.startsWith('tcp://') ? endpoint.slice('tcp://'.length) : endpoint;
  const pkg = csiGrpc().csi.v1;
  const creds = grpc.credentials.createInsecure();
  const clients: grpc.Client[] = [];

  function service<D extends grpc.ServiceDefinition>(ctor: {
    new (address: string, credentials: grpc.ChannelCredentials): grpc.Client;
    service: D;
  }): Rpcs<D> {
    const client = new ctor(target, creds);
    clients.push(client);
    const rpcs: Record<string, (req?: unknown, o?: CallOptions) => Promise<unknown>> = {};
    // The generated client has one method per RPC, named as in the definition's keys.
    for (const method of Object.keys(ctor.service)) {
      const fn = (client as unknown as Record<string, UnaryFn>)[method];
      if (fn === undefined) throw new Error(`generated client has no method ${method}`);
      rpcs[method] = (req = {}, o = {}) =>
        new Promise((resolve, reject) => {
          const deadline = new Date(Date.now() + (o.timeoutMs ?? timeoutMs));
          fn.call(client, req, o.metadata ?? new grpc.Metadata(), { deadline }, (err, res) => {
            if (err) reject(err);
            else resolve(res);
          });
        });
    }
    // The keys are exactly the definition's methods, each calling the method of that name, so the
    // record is the mapped type; TypeScript cannot follow a loop over keys, hence the one cast.
    return rpcs as Rpcs<D>;
  }

  const identity = service(pkg.Identity);
  const controller = service(pkg.Controller);
  const node = service(pkg.Node);
  const untyped = { identity, controller, node } as unknown as Record<
    string,
    Record<string, ((req: object) => Promise<unknown>) | undefined>
  >;
  return {
    identity,
    controller,
    node,
    raw: (svc, method, req) => {
      const fn = untyped[svc]?.[method];
      if (fn === undefined) return Promise.reject(new Error(`no RPC ${svc}.${method}`));
      return fn(req);
    },
    close: () => {
      for (const c of clients) c.close();
    },
  };
}
