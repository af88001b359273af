#!/usr/bin/env bash
# npm run chaos [-- --long] [-- --only storm,kill,snapshots,cancel,nfs,nfs-snapshots,input]
# The chaos suite (test/chaos/main.ts): the real program under faults, kill -9, cancelled callers,
# a frozen and killed NFS server, kill -9 inside NFS snapshot copies and hostile input; prints one
# table, exits non-zero on any violation. Root: the bad-input scenario runs the program in a mount namespace of its own.
# --long: longer scenarios, then scripts/pbt-long.sh (the property searches, 3000 cases each).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/ensure.sh
ensure_host_tier
rc=0
node --import=tsx test/chaos/main.ts "$@" || rc=$?
# --long also runs the ownership property searches for longer with a new printed seed (the same
# run as npm run pbt; docs/testing.md): the chaos suite samples faults, they search for inputs.
if [[ " $* " == *" --long "* ]]; then bash scripts/pbt-long.sh || rc=$?; fi
exit "$rc"
