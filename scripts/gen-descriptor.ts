// Builds src/gen/csi-descriptor.json from proto/csi.proto at `npm run gen` time, so the program
// never parses a .proto file at run time (parsing it plus @grpc/proto-loader's descriptor work was
// ~280 ms of every start). The JSON is protobufjs's own descriptor format (Root.toJSON), read back
// by protobufjs/light at run time (src/server/proto.ts); field names are camelCase as the
// generated types in src/gen expect. Kept: the csi.v1 package with its field options (the log
// redaction reads `(csi_secret)`) and the google.protobuf types it uses. Left out: descriptor.proto
// and csi.v1's option extensions (needed only to parse option syntax). A unit test checks the file
// is what this script makes from the .proto (test/unit/server/descriptor.test.ts).
//   npx tsx scripts/gen-descriptor.ts [--check]
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

const require = createRequire(import.meta.url);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const PROTO_FILE = path.join(ROOT, 'proto/csi.proto');
export const DESCRIPTOR_FILE = path.join(ROOT, 'src/gen/csi-descriptor.json');

type Json = Record<string, unknown> & { nested?: Record<string, Json>; options?: unknown };

export function buildDescriptor(): Json {
  const root = new protobuf.Root();
  const resolve = root.resolvePath.bind(root);
  // google/protobuf/* come with protobufjs rather than from our proto directory.
  root.resolvePath = (origin, target) =>
    target.startsWith('google/protobuf/') ? require.resolve(`protobufjs/${target}`) : resolve(origin, target);
  // keepCase false: the same camelCase field names @grpc/proto-loader and src/gen use.
  root.loadSync(PROTO_FILE, { keepCase: false });
  root.resolveAll();

  const used = new Set<string>();
  const walk = (ns: protobuf.NamespaceBase): void => {
    for (const obj of ns.nestedArray) {
      if (obj instanceof protobuf.Type)
        for (const f of obj.fieldsArray) if (f.resolvedType) used.add(f.resolvedType.fullName);
      if (obj instanceof protobuf.Namespace || obj instanceof protobuf.Type) walk(obj);
    }
  };
  const v1 = root.lookup('csi.v1') as protobuf.Namespace;
  walk(v1);

  const json = root.toJSON({ keepComments: false }) as Json;
  const csiV1 = json.nested?.['csi']?.nested?.['v1'];
  const googleProtobuf = json.nested?.['google']?.nested?.['protobuf'];
  if (!csiV1?.nested || !googleProtobuf?.nested) throw new Error('unexpected descriptor shape');
  csiV1.nested = Object.fromEntries(Object.entries(csiV1.nested).filter(([, def]) => !('extend' in def)));
  // File options of whichever google/protobuf file protobufjs happened to load first: not ours.
  delete googleProtobuf.options;
  googleProtobuf.nested = Object.fromEntries(
    Object.entries(googleProtobuf.nested).filter(([name]) => used.has(`.google.protobuf.${name}`)),
  );
  return json;
}

export function descriptorText(): string {
  return JSON.stringify(buildDescriptor()) + '\n';
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const text = descriptorText();
  if (process.argv.includes('--check')) {
    if (fs.readFileSync(DESCRIPTOR_FILE, 'utf8') !== text) {
      process.stderr.write(`${DESCRIPTOR_FILE} is stale: npm run gen\n`);
      process.exit(1);
    }
  } else fs.writeFileSync(DESCRIPTOR_FILE, text);
}
