#!/usr/bin/env bash
# npm run pbt [-- RUNS]: the ownership property searches (docs/testing.md) with a new random seed
# (one for all, printed first) and RUNS cases (default 3000; the simulator and each ganesha
# layout a tenth of that), for longer than the bounded runs of npm test. Each search prints its
# cases, steps and seed: replay with PBT_SEED=<seed>. npm run chaos -- --long ends with this run.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh
ensure_host_tier libnfs-utils
runs="${1:-3000}"
# One seed for every search, printed first: the whole run replays with PBT_SEED=<seed>.
seed="${PBT_SEED:-random}"
[ "$seed" = random ] && seed=$(( $(date +%s%N) / 1000000 % 2147483648 ))
echo "pbt: PBT_SEED=$seed PBT_RUNS=$runs (replay: PBT_SEED=$seed npm run pbt -- $runs)"
export PBT_SEED="$seed" PBT_RUNS="$runs" PBT_SIM_RUNS="$((runs / 10))" PBT_GANESHA_RUNS="$((runs / 10))"
npx tap --timeout 3600 \
  test/unit/proxmox/controller/safety/ownership.pbt.test.ts \
  test/unit/nfs/controller/store/ownership.property.test.ts \
  test/unit/nfs/controller/store/ownership-snapshots.property.test.ts \
  test/unit/nfs/controller/store/ownership-ids.property.test.ts \
  test/unit/cli/day2-property.test.ts \
  test/integration/proxmox/ownership-pbt.test.ts \
  test/integration/nfs/ownership.property.ganesha.test.ts
