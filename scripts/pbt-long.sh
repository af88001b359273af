#!/usr/bin/env bash
# npm run pbt [-- RUNS]: the ownership property searches (docs/testing.md) with a new random seed
# each and RUNS cases (default 3000; the simulator and ganesha runs a tenth of that), for longer
# than the bounded runs of npm test. Each prints its seed: replay with PBT_SEED=<seed>.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh
ensure_host_tier libnfs-utils
runs="${1:-3000}"
export PBT_SEED="${PBT_SEED:-random}" PBT_RUNS="$runs" PBT_SIM_RUNS="$((runs / 10))"
npx tap --timeout 3600 \
  test/unit/proxmox/controller/safety/ownership.pbt.test.ts \
  test/unit/nfs/ownership.property.test.ts \
  test/unit/cli/day2-property.test.ts \
  test/integration/proxmox/ownership-pbt.test.ts \
  test/integration/nfs/ownership.property.ganesha.test.ts
