#!/usr/bin/env bash
# npm run sanity -- <proxmox|nfs> [--vm] [-- extra csi-sanity flags]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh
ensure_node_modules
ensure_host_tools
ensure_sanity
[ "${1:-}" = nfs ] && ensure_apt nfs-ganesha nfs-ganesha-vfs rpcbind
ensure_build
exec node --import=tsx scripts/sanity.ts "$@"
