#!/usr/bin/env bash
# npm run bench: every benchmark under bench/, each printing its own table.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh
ensure_host_tier
# The program under test runs compiled (dist/src/main.js), as the image runs it; the bench
# harnesses themselves run through tsx.
npx tsc -p tsconfig.json
for b in bench/*.ts; do
  echo "=== $b"
  node --import=tsx "$b"
done
