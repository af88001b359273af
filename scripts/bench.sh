#!/usr/bin/env bash
# npm run bench: every benchmark under bench/, each printing its own table.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh
ensure_host_tier
# The program under test runs as the image runs it (bench/lib/program.ts): image/entrypoint.sh
# starting the esbuild bundle, built here from tsc's output; the bench harnesses run through tsx.
npm run --silent bundle
for b in bench/*.ts; do
  echo "=== $b"
  node --import=tsx "$b"
done
