#!/usr/bin/env bash
# npm run demo: installs what it needs, builds, and runs test/harness/demo.ts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh
ensure_host_tier
ensure_build
exec node --import=tsx test/harness/demo.ts "$@"
