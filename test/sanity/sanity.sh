#!/usr/bin/env bash
# npm run sanity -- <proxmox|nfs> [--vm] [-- extra csi-sanity flags]
#   host tier: the program on this host (simulator with loop-device disks, or ganesha)
#   --vm:      controller on this host, node plugin inside the QEMU guest (real SCSI hot-plug,
#              real kernel NFS mounts); see test/vm/README.md
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/ensure.sh
ensure_node_modules
ensure_host_tools
ensure_sanity
[ "${1:-}" = nfs ] && ensure_apt nfs-ganesha nfs-ganesha-vfs rpcbind
ensure_build
driver="${1:-}"
vm=0; rest=(); passthrough=0
for a in "${@:2}"; do
  if [ "$passthrough" = 0 ] && [ "$a" = --vm ]; then vm=1; continue; fi
  [ "$a" = -- ] && passthrough=1
  rest+=("$a")
done
if [ "$vm" = 1 ]; then
  exec bash test/vm/vm.sh run -- node --import=tsx test/vm/tier.ts sanity "$driver" "${rest[@]}"
fi
exec node --import=tsx test/sanity/main.ts "$driver" "${rest[@]}"
