// The CSI protocol at run time: gRPC service definitions for the servers and clients, and the
// protobufjs reflection root that log redaction reads the `csi_secret` field option from. Both
// come from src/gen/csi-descriptor.json, built from proto/csi.proto at `npm run gen` time
// (scripts/gen-descriptor.ts): parsing the .proto and @grpc/proto-loader's descriptor work at
// every start cost ~280 ms and several MiB that nothing used (file descriptors for reflection).
import * as grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs/light.js';
import descriptor from '../gen/csi-descriptor.json' with { type: 'json' };
import type { ProtoGrpcType } from '../gen/csi.js';

/**
 * The conversions the generated types were made with (scripts/gen.sh) and @grpc/proto-loader
 * applied: int64 as decimal strings, enums by name, unset fields as their defaults, the name of
 * the set member of a oneof.
 */
export const CONVERSION: protobuf.IConversionOptions = { longs: String, enums: String, defaults: true, oneofs: true };

const SERVICES = ['Identity', 'Controller', 'Node', 'GroupController'] as const;
type ServiceName = (typeof SERVICES)[number];
export type CsiServices = Pick<ProtoGrpcType['csi']['v1'], ServiceName>;

let root: protobuf.Root | undefined;
export function csiReflection(): protobuf.Root {
  if (!root) {
    root = protobuf.Root.fromJSON(descriptor as unknown as protobuf.INamespace);
    root.resolveAll();
  }
  return root;
}

function serializer(type: protobuf.Type): (value: object) => Buffer {
  return (value) => {
    // As @grpc/proto-loader: a plain object in the generated types' shape, converted, encoded.
    if (Array.isArray(value))
      throw new Error(`Failed to serialize message: expected object with ${type.name} structure, got array instead`);
    const bytes = type.encode(type.fromObject(value)).finish();
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
}

function deserializer(type: protobuf.Type): (buf: Buffer) => object {
  return (buf) => type.toObject(type.decode(buf), CONVERSION);
}

function serviceDefinition(name: ServiceName): grpc.ServiceDefinition {
  const service = csiReflection().lookupService(`csi.v1.${name}`);
  const def: Record<string, grpc.MethodDefinition<object, object>> = {};
  for (const m of service.methodsArray) {
    m.resolve();
    const req = m.resolvedRequestType;
    const res = m.resolvedResponseType;
    if (!req || !res) throw new Error(`csi.v1.${name}.${m.name}: unresolved message types`);
    def[m.name] = {
      path: `/csi.v1.${name}/${m.name}`,
      requestStream: !!m.requestStream,
      responseStream: !!m.responseStream,
      requestSerialize: serializer(req),
      requestDeserialize: deserializer(req),
      responseSerialize: serializer(res),
      responseDeserialize: deserializer(res),
      // proto-loader's lodash.camelCase of a PascalCase method name: a client answers to both.
      originalName: m.name.charAt(0).toLowerCase() + m.name.slice(1),
    };
  }
  return def;
}

let services: CsiServices | undefined;
/** Client constructors (with `.service`, the server-side definition) of the CSI services. */
export function csiGrpc(): { csi: { v1: CsiServices } } {
  services ??= Object.fromEntries(
    SERVICES.map((s) => [s, grpc.makeGenericClientConstructor(serviceDefinition(s), `csi.v1.${s}`)]),
  ) as unknown as CsiServices;
  return { csi: { v1: services } };
}
