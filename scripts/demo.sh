#!/usr/bin/env bash
# npm run demo: installs what it needs, builds, and runs scripts/demo.ts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh
ensure_node_modules
ensure_host_tools
ensure_apt nfs-ganesha nfs-ganesha-vfs rpcbind
ensure_build
exec node --import=tsx scripts/demo.ts "$@"
