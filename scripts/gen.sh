#!/usr/bin/env bash
# Regenerates the TypeScript types of proto/csi.proto, and the descriptor the program loads at
# run time instead of parsing the .proto (scripts/gen-descriptor.ts). The generator writes extension-less
# relative imports; NodeNext ESM resolution needs ".js", so they are added here.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf src/gen
npx proto-loader-gen-types --longs=String --enums=String --defaults --oneofs \
  --grpcLib=@grpc/grpc-js --outDir=src/gen proto/csi.proto >/dev/null
find src/gen -name '*.ts' -print0 | xargs -0 sed -i -E "s#(from '\.[^']+)';#\1.js';#"
npx tsx scripts/gen-descriptor.ts
