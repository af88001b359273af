# shellcheck shell=bash
# The one list of test tiers, sourced by scripts/tier.sh (`npm run test:<tier>`, one tier) and
# scripts/test.sh (`npm test`, every line in this order). One line per phase of `npm test`:
#
#   tier | skip switch | phase name (printed by npm test) | command
#
# - tier: the name scripts/tier.sh takes; a tier of several lines runs them in order and stops at
#   the first that fails (sanity: its three csi-sanity runs).
# - skip switch: an environment variable; `npm test` skips the phase when it is 1 (scripts/tier.sh
#   runs a tier it is asked for regardless).
# - command: bash, run in a subshell with scripts/lib/ensure.sh loaded; "$@" in it is
#   scripts/tier.sh's extra arguments (npm test passes none).
# Adding a tier or a phase is adding its line here.
#
# The tiers (what each may use, where its tests are):
#   lint, format, typecheck, build   the static checks and the compile, cheapest first
#   unit         pure and fast: no root, no server or socket, no network, no ganesha, no loop
#                devices, no simulator over HTTPS (in-process fakes only). test/unit, sim/test/unit;
#                the tap config's include is this tier (so a bare `npx tap` is the unit tier too)
#   integration  real ganesha, loop devices and mounts (root), the simulator over HTTPS, gRPC
#                servers, the program as a process. test/integration, sim/test, test/vm/*.test.ts
#   pve-real     the driver against Proxmox VE 9's own Perl API code (qemu-server, pve-storage,
#                pve-access-control, pve-manager; stand-ins in docs/testing.md), root. test/pve-real
#   sanity       csi-sanity against the program: Proxmox (mount, block) and NFS, host tier
#   chaos        the chaos suite (bounded)
#   chart        the Helm chart (helm lint, template, schema)
#   workflows    actionlint (+ shellcheck) on .github/workflows
#   image        the real Dockerfile, built and run with buildah + podman
#   containers   csi-sanity (and the NFS server) as container images, one pass per driver; the
#                kubelet tier's own images (test/kubelet/images.test.ts)
#   k8s-cli      the day-2 subcommands against etcd, kube-apiserver, the simulator and ganesha
#   k8s          etcd, kube-apiserver, kube-controller-manager, the sidecars and the chart
#   release      a local TLS registry: release N-1 and N built and pushed, pulled, installed with
#                helm from oci://, upgraded and rolled back in the k8s tier's cluster
#   vm           the QEMU guest: csi-sanity of both drivers, end-to-end
#   kubelet      a real node in the QEMU guest (kubelet, containerd, runc, CNI) joined to the k8s
#                tier's control plane with kube-scheduler; the chart's DaemonSet and real pods
# shellcheck disable=SC2016 # the commands are expanded when they run, not here
TIERS=(
  'lint        |            | lint (typescript-eslint, strict type-checked)                             | npm run --silent lint'
  'format      |            | format (prettier --check; npm run format rewrites)                        | npm run --silent format:check'
  'typecheck   |            | typecheck (tsc --noEmit)                                                  | npx tsc --noEmit -p tsconfig.json'
  'build       |            | build                                                                     | npx tsc -p tsconfig.json'
  'unit        |            | unit tier (pure: fakes only)                                              | ensure_node_modules && npx tap "$@"'
  "integration |            | integration tier (ganesha, loop devices, simulator over HTTPS, servers)   | ensure_host_tier libnfs-utils && { [ \$# -gt 0 ] || set -- 'test/integration/**/*.test.ts' 'sim/test/*.test.ts' 'test/vm/*.test.ts'; npx tap \"\$@\"; }"
  'pve-real    | SKIP_PVE_REAL | Proxmox VE 9 own API code (real qemu-server, pve-storage, access control) | ensure_node_modules && source scripts/lib/pve-real.sh && ensure_pve_real && { [ $# -gt 0 ] || set -- test/pve-real/*.test.ts; npx tap --timeout 900 "$@"; }'
  'sanity      |            | csi-sanity proxmox (mount)                                                | bash test/sanity/sanity.sh proxmox "$@"'
  'sanity      |            | csi-sanity proxmox (block)                                                | bash test/sanity/sanity.sh proxmox -- --csi.testvolumeaccesstype=block'
  'sanity      |            | csi-sanity nfs                                                            | bash test/sanity/sanity.sh nfs'
  'chaos       |            | chaos suite (bounded)                                                     | bash test/chaos/chaos.sh "$@"'
  'chart       |            | helm chart                                                                | bash test/helm/tier.sh "$@"'
  'workflows   |            | workflows (actionlint + shellcheck)                                       | bash test/release/tier.sh lint'
  'image       | SKIP_IMAGE | image (real Dockerfile, buildah + podman)                                 | bash scripts/image.sh "$@"'
  'containers  | SKIP_IMAGE | csi-sanity proxmox (csi-sanity image, podman)                             | bash scripts/test-images.sh proxmox'
  'containers  | SKIP_IMAGE | csi-sanity nfs (csi-sanity + NFS server images, podman)                   | bash scripts/test-images.sh nfs'
  'containers  | SKIP_IMAGE | kubelet images (pause, node-driver-registrar, workload images, podman)    | npx tap --timeout 900 test/kubelet/images.test.ts'
  'k8s-cli     |            | k8s CLI tier (day-2 subcommands: etcd, kube-apiserver, simulator, ganesha) | bash test/k8s/cli/tier.sh "$@"'
  'k8s         |            | k8s tier (etcd, kube-apiserver, controller-manager, sidecars, chart)      | bash test/k8s/tier.sh "$@"'
  'release     | SKIP_IMAGE | release (local registry: build, push, helm install, upgrade, rollback)    | bash test/release/tier.sh "${@:-upgrade}"'
  'vm          | SKIP_VM    | VM tier (guest: sanity proxmox+nfs, end-to-end)                           | bash test/vm/tier.sh "${@:-all}"'
  'kubelet     | SKIP_KUBELET | kubelet tier (guest node: kubelet+containerd+CNI, chart DaemonSet, pods)  | bash test/kubelet/tier.sh "$@"'
)

_tiers_trim() {
  local s="$1"
  s="${s#"${s%%[![:space:]]*}"}"
  printf '%s' "${s%"${s##*[![:space:]]}"}"
}

# tier_fields LINE: sets TIER, SKIP, NAME and CMD from one line of TIERS (its callers read them).
# shellcheck disable=SC2034
tier_fields() {
  local tier skip name cmd
  IFS='|' read -r tier skip name cmd <<<"$1"
  TIER="$(_tiers_trim "$tier")"
  SKIP="$(_tiers_trim "$skip")"
  NAME="$(_tiers_trim "$name")"
  CMD="$(_tiers_trim "$cmd")"
}

# tier_names: each tier once, in the order of TIERS.
tier_names() {
  local line seen=" "
  for line in "${TIERS[@]}"; do
    tier_fields "$line"
    case "$seen" in *" $TIER "*) continue ;; esac
    seen+="$TIER "
    printf '%s\n' "$TIER"
  done
}

# tier_exec CMD [ARGS...]: runs one phase's command in a subshell, ARGS as its "$@".
tier_exec() {
  (
    local cmd="$1"
    shift
    eval "$cmd"
  )
}
