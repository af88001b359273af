#!/usr/bin/env bash
# npm run test:<tier>: one test tier, set up as it needs, then its wall time.
#   unit         pure and fast: no root, no server or socket, no network, no ganesha, no loop
#                devices, no simulator over HTTPS (in-process fakes only). test/unit, sim/test/unit
#   integration  real ganesha, loop devices and mounts (root), the simulator over HTTPS, gRPC
#                servers, the program as a process. test/integration, sim/test, test/vm/*.test.ts
#   sanity       csi-sanity against the program: Proxmox (mount, block) and NFS, host tier
#   chaos        the chaos suite (bounded)
#   k8s          etcd, kube-apiserver, kube-controller-manager, the sidecars and the chart
#   vm           the QEMU guest: csi-sanity of both drivers, end-to-end
# Extra arguments go to the tier's runner (tap for unit and integration: files or --grep).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh

tier="${1:?usage: scripts/tier.sh unit|integration|sanity|chaos|k8s|vm [args]}"
shift
t0=$SECONDS
run() {
  case "$tier" in
    unit)
      ensure_node_modules
      # The tap config's include is this tier (so a bare `npx tap` is the unit tier too).
      npx tap "$@" ;;
    integration)
      ensure_host_tier libnfs-utils
      if [ $# -gt 0 ]; then npx tap "$@"
      else npx tap 'test/integration/**/*.test.ts' 'sim/test/*.test.ts' 'test/vm/*.test.ts'; fi ;;
    sanity)
      bash scripts/sanity.sh proxmox "$@" &&
        bash scripts/sanity.sh proxmox -- --csi.testvolumeaccesstype=block &&
        bash scripts/sanity.sh nfs ;;
    chaos) bash scripts/chaos.sh "$@" ;;
    k8s) bash scripts/k8s-tier.sh "$@" ;;
    vm) if [ $# -gt 0 ]; then bash scripts/vm-tier.sh "$@"; else bash scripts/vm-tier.sh all; fi ;;
    *) echo "scripts/tier.sh: unknown tier \"$tier\"" >&2; return 2 ;;
  esac
}
run "$@"
rc=$?
echo "=== $tier tier: $((SECONDS - t0)) s ($([ "$rc" = 0 ] && echo ok || echo "FAILED, exit $rc"))"
exit "$rc"
