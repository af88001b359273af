#!/usr/bin/env bash
# `npm test`: everything the project tests, after installing what it needs. Prints the time of
# each phase and a closing "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh

passed=0; failed=0; failures=()
phase() {
  local name="$1"; shift
  local t0=$SECONDS
  echo "=== $name"
  if "$@"; then passed=$((passed+1)); echo "=== $name: ok ($((SECONDS-t0)) s)"
  else failed=$((failed+1)); failures+=("$name"); echo "=== $name: FAILED ($((SECONDS-t0)) s)"; fi
}

t0=$SECONDS
ensure_host_tier libnfs-utils
ensure_sanity
echo "=== setup done ($((SECONDS-t0)) s)"

# First: the cheapest phase that finds the most (eslint.config.js).
phase "lint (typescript-eslint, strict type-checked)" npm run --silent lint
phase "format (prettier --check; npm run format rewrites)" npm run --silent format:check
phase "typecheck (tsc --noEmit)" npx tsc --noEmit -p tsconfig.json
phase "build" npx tsc -p tsconfig.json
phase "unit tier (pure: fakes only)" bash scripts/tier.sh unit
phase "integration tier (ganesha, loop devices, simulator over HTTPS, servers)" bash scripts/tier.sh integration
phase "csi-sanity proxmox (mount)" bash scripts/sanity.sh proxmox
phase "csi-sanity proxmox (block)" bash scripts/sanity.sh proxmox -- --csi.testvolumeaccesstype=block
phase "csi-sanity nfs" bash scripts/sanity.sh nfs
phase "chaos suite (bounded)" bash scripts/chaos.sh
[ -f scripts/helm-test.sh ] && phase "helm chart" bash scripts/helm-test.sh
[ "${SKIP_IMAGE:-0}" != 1 ] && phase "image (real Dockerfile, buildah + podman)" bash scripts/image.sh
phase "k8s CLI tier (day-2 subcommands: etcd, kube-apiserver, simulator, ganesha)" bash scripts/k8s-cli.sh
phase "k8s tier (etcd, kube-apiserver, controller-manager, sidecars, chart)" bash scripts/k8s-tier.sh
[ "${SKIP_VM:-0}" != 1 ] && phase "VM tier (guest: sanity proxmox+nfs, end-to-end)" bash scripts/vm-tier.sh all

echo
echo "total time: $((SECONDS-t0)) s"
[ ${#failures[@]} -gt 0 ] && printf 'failed phase: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
