#!/usr/bin/env bash
# npm run chaos [-- --long] [-- --only storm,kill,cancel,nfs,input]
# The chaos suite (test/chaos/main.ts): the real program under faults, kill -9, cancelled callers,
# a frozen and killed NFS server and hostile input; prints one table, exits non-zero on any
# violation. Root: the bad-input scenario runs the program in a mount namespace of its own.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/ensure.sh
ensure_host_tier
exec node --import=tsx test/chaos/main.ts "$@"
