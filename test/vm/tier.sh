#!/usr/bin/env bash
# The VM tier of `npm test`: one guest boot, then csi-sanity for both drivers with the node in
# the guest, then the end-to-end scenario (test/vm/tier.ts).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/ensure.sh
ensure_node_modules
ensure_sanity
ensure_build
exec bash test/vm/vm.sh run -- node --import=tsx test/vm/tier.ts "${@:-all}"
