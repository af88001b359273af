// Loads proto/csi.proto once: the grpc package definition for the servers and the protobufjs
// reflection root that log redaction reads the `csi_secret` field option from.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';
import type { ProtoGrpcType } from '../gen/csi.js';

const require = createRequire(import.meta.url);

/** The same conversions the generated types were made with (scripts/gen.sh). */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

/** Walks up from this module so the path works from src/ (tsx) and from dist/src/ (compiled). */
export function findProtoFile(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = path.join(dir, 'proto', 'csi.proto');
    if (fs.existsSync(candidate)) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error('proto/csi.proto not found above ' + fileURLToPath(import.meta.url));
    dir = parent;
  }
}

let cached: ProtoGrpcType | undefined;
export function csiGrpc(): ProtoGrpcType {
  cached ??= grpc.loadPackageDefinition(
    protoLoader.loadSync(findProtoFile(), LOADER_OPTIONS),
  ) as unknown as ProtoGrpcType;
  return cached;
}

let root: protobuf.Root | undefined;
export function csiReflection(): protobuf.Root {
  if (root) return root;
  const r = new protobuf.Root();
  const resolve = r.resolvePath.bind(r);
  // google/protobuf/* come with protobufjs rather than from our proto directory.
  r.resolvePath = (origin, target) =>
    target.startsWith('google/protobuf/') ? require.resolve(`protobufjs/${target}`) : resolve(origin, target);
  r.loadSync(findProtoFile(), { keepCase: false });
  r.resolveAll();
  root = r;
  return r;
}
