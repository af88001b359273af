#!/usr/bin/env bash
# Builds the real Kubernetes components the k8s tier runs, from their Go modules:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the CSI sidecars the chart
# pins (versions read from charts/pve-nfs-csi/values.yaml, so a pin change rebuilds), and
# snapshot-controller with the VolumeSnapshot CRDs at the snapshotter's pin.
# Binaries are cached outside the checkout, keyed by version:
#   ~/.cache/pve-nfs-csi/k8s-<version>/kube-*   ~/.cache/pve-nfs-csi/etcd-<version>/etcd
#   ~/.cache/pve-nfs-csi/<sidecar>-<version>/<sidecar>   (snapshot-controller too)
#   ~/.cache/pve-nfs-csi/snapshot-crds-<version>/*.yaml
# Usage: scripts/k8s-build.sh [component...]   (default: all; components: etcd csi-provisioner
#   csi-attacher csi-resizer csi-snapshotter snapshot-controller snapshot-crds kube-apiserver
#   kube-controller-manager kube-scheduler; kubelet, containerd, containerd-shim-runc-v2 and ctr
#   are built only when named: the kubelet tier asks for them; containerd lands in
#   ~/.cache/pve-nfs-csi/containerd-<version>/)
# Prints NAME=/path/to/binary lines on stdout (NAME upper-cased, dashes as underscores); the
# build log goes to stderr with each build's time. Cold, on 2 shared cores, this takes tens of
# minutes (kube-apiserver dominates); warm it takes well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ensure.sh

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
# The kubelet node's CRI runtime: kubelet >= 1.36 needs the RuntimeConfig CRI call (containerd 2.x).
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
CACHE="${PVE_NFS_CSI_CACHE:-$HOME/.cache/pve-nfs-csi}"
WRAPPERS="$CACHE/build"
# The build competes with whatever else the machine runs; a little nice keeps it from starving
# interactive work without slowing it much when the machine is idle.
NICE="${K8S_BUILD_NICE:-5}"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod"

log() { echo "k8s-build: $*" >&2; }

sidecar_version() { # sidecar_version provisioner
  ensure_node_modules
  node --input-type=module -e '
    import { readFileSync } from "node:fs"; import YAML from "yaml";
    const v = YAML.parse(readFileSync("charts/pve-nfs-csi/values.yaml", "utf8"));
    const tag = v?.sidecars?.[process.argv[1]]?.image?.tag;
    if (!tag) { console.error(`no sidecars.${process.argv[1]}.image.tag in values.yaml`); process.exit(1); }
    console.log(tag);' "$1"
}

# mod_download MODULE VERSION FIELD: downloads the module into the module cache and prints one
# field of `go mod download -json` (GoMod: its go.mod; Dir: its unpacked tree).
mod_download() {
  go mod download -json "$1@$2" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);if(j.Error){console.error(j.Error);process.exit(1)}console.log(j[process.argv[1]])})' "$3"
}
upstream_gomod() { mod_download "$1" "$2" GoMod; }

# prepare_wrapper DIR MODULE VERSION [STAGING_VERSION]: DIR holds the wrapper's Go files;
# writes its go.mod and resolves it (go mod tidy) unless it is already resolved.
prepare_wrapper() {
  local dir="$1" module="$2" version="$3" staging="${4:-}" lock
  [ -f "$dir/.tidy-done" ] && return 0
  # Two builds at once (two checkouts, or a prefetch) must not resolve the same wrapper together.
  exec {lock}>"$dir/.lock"; flock "$lock"
  if [ -f "$dir/.tidy-done" ]; then exec {lock}>&-; return 0; fi
  local t0=$SECONDS
  log "resolving $module@$version"
  local gomod; gomod="$(upstream_gomod "$module" "$version")"
  go mod edit -json "$gomod" | node test/k8s/build/gomod.mjs "example.local/${dir##*/}" "$module" "$version" $staging >"$dir/go.mod"
  rm -f "$dir/go.sum"
  (cd "$dir" && nice -n "$NICE" go mod tidy >&2)
  touch "$dir/.tidy-done"
  exec {lock}>&-
  log "resolved $module@$version in $((SECONDS-t0)) s"
}

# build NAME OUTDIR WRAPPERDIR PACKAGE LDFLAGS
build() {
  local name="$1" out="$2/$1" dir="$3" pkg="$4" ldflags="$5"
  if [ -x "$out" ]; then echo "$(echo "$name" | tr a-z- A-Z_)=$out"; return 0; fi
  # Another build of the same binary (a parallel run) finishes first; then use its result.
  mkdir -p "$2"
  local lock; exec {lock}>"$out.lock"; flock "$lock"
  if [ -x "$out" ]; then exec {lock}>&-; echo "$(echo "$name" | tr a-z- A-Z_)=$out"; return 0; fi
  local t0=$SECONDS
  log "building $name ($pkg) — the first build of a Kubernetes binary takes many minutes"
  mkdir -p "$2"
  (cd "$dir" && nice -n "$NICE" go build -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg" >&2)
  mv "$out.tmp" "$out"
  exec {lock}>&-
  log "built $name in $((SECONDS-t0)) s -> $out"
  echo "$(echo "$name" | tr a-z- A-Z_)=$out"
}

build_etcd() {
  local dir="$WRAPPERS/etcd-$ETCD_VERSION"
  if [ ! -x "$CACHE/etcd-$ETCD_VERSION/etcd" ]; then
    mkdir -p "$dir"; cp test/k8s/build/etcd/main.go "$dir/"
    prepare_wrapper "$dir" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
  fi
  build etcd "$CACHE/etcd-$ETCD_VERSION" "$dir" . ""
}

# build_sidecar NAME VALUES_KEY MODULE_BASE: MODULE_BASE without the /vN major suffix.
build_sidecar() {
  local name="$1" version; version="$(sidecar_version "$2")"
  local major="${version%%.*}"; major="${major#v}"
  local module="$3"; [ "$major" -ge 2 ] && module="$3/v$major"
  local dir="$WRAPPERS/$name-$version"
  if [ ! -x "$CACHE/$name-$version/$name" ]; then
    mkdir -p "$dir"
    printf '//go:build tools\n\n// Pins the command this wrapper module builds.\npackage tools\n\nimport _ "%s/cmd/%s"\n' "$module" "$name" >"$dir/tools.go"
    prepare_wrapper "$dir" "$module" "$version"
  fi
  build "$name" "$CACHE/$name-$version" "$dir" "$module/cmd/$name" "-X main.version=$version"
}

# csi-snapshotter and snapshot-controller come from one module and are released together: one
# wrapper builds both at the chart's snapshotter pin. The VolumeSnapshot CRDs are the YAML files of
# the same release's client module (config/crd), copied into the cache at build time.
snapshotter_version() { sidecar_version snapshotter; }
snapshotter_dir() { echo "$WRAPPERS/external-snapshotter-$1"; }
prepare_snapshotter() {
  local version="$1" dir; dir="$(snapshotter_dir "$1")"
  local major="${version%%.*}"
  local module="github.com/kubernetes-csi/external-snapshotter/$major"
  mkdir -p "$dir"
  printf '//go:build tools\n\n// Pins the commands this wrapper module builds.\npackage tools\n\nimport (\n\t_ "%s/cmd/csi-snapshotter"\n\t_ "%s/cmd/snapshot-controller"\n)\n' "$module" "$module" >"$dir/tools.go"
  prepare_wrapper "$dir" "$module" "$version"
}
build_snapshotter() { # build_snapshotter csi-snapshotter|snapshot-controller
  local name="$1" version; version="$(snapshotter_version)"
  local major="${version%%.*}"
  [ -x "$CACHE/$name-$version/$name" ] || prepare_snapshotter "$version"
  build "$name" "$CACHE/$name-$version" "$(snapshotter_dir "$version")" \
    "github.com/kubernetes-csi/external-snapshotter/$major/cmd/$name" "-X main.version=$version"
}
# snapshot-crds: a directory of the three snapshot.storage.k8s.io CRDs (the group snapshot ones
# stay out: neither driver offers group snapshots).
build_snapshot_crds() {
  local version; version="$(snapshotter_version)"
  local out="$CACHE/snapshot-crds-$version"
  if [ ! -f "$out/.done" ]; then
    local major="${version%%.*}" src
    src="$(mod_download "github.com/kubernetes-csi/external-snapshotter/client/$major" "$version" Dir)"
    mkdir -p "$out"
    cp "$src"/config/crd/snapshot.storage.k8s.io_*.yaml "$out/"
    chmod 0644 "$out"/*.yaml
    touch "$out/.done"
    log "copied the VolumeSnapshot CRDs of $version -> $out"
  fi
  echo "SNAPSHOT_CRDS=$out"
}

kube_dir() { echo "$WRAPPERS/kubernetes-$K8S_VERSION"; }
prepare_kube() {
  local dir; dir="$(kube_dir)"
  mkdir -p "$dir"
  printf '//go:build tools\n\n// Pins the commands this wrapper module builds.\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler"\n\t_ "k8s.io/kubernetes/cmd/kubelet"\n)\n' >"$dir/tools.go"
  local minor_patch="${K8S_VERSION#v1.}"
  prepare_wrapper "$dir" k8s.io/kubernetes "$K8S_VERSION" "v0.$minor_patch"
}
build_kube() {
  local name="$1" out="$CACHE/k8s-$K8S_VERSION"
  if [ ! -x "$out/$name" ]; then prepare_kube; fi
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local x="" p
  # What Kubernetes' own build (hack/lib/version.sh) stamps, so /version reports the release.
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    x+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  build "$name" "$out" "$(kube_dir)" "k8s.io/kubernetes/cmd/$name" "$x"
}

# build_containerd NAME: containerd's go.mod has no replace lines, so `go install` builds it
# straight from the module proxy (no wrapper). no_btrfs: the btrfs snapshotter needs cgo.
build_containerd() {
  local name="$1" out="$CACHE/containerd-$CONTAINERD_VERSION" mod=github.com/containerd/containerd/v2
  if [ -x "$out/$name" ]; then echo "$(echo "$name" | tr a-z- A-Z_)=$out/$name"; return 0; fi
  mkdir -p "$out"
  local lock; exec {lock}>"$out/$name.lock"; flock "$lock"
  if [ ! -x "$out/$name" ]; then
    local t0=$SECONDS
    log "building $name $CONTAINERD_VERSION"
    GOBIN="$out" GOFLAGS= nice -n "$NICE" go install -tags no_btrfs \
      -ldflags "-s -w -X $mod/version.Version=$CONTAINERD_VERSION" "$mod/cmd/$name@$CONTAINERD_VERSION" >&2
    log "built $name in $((SECONDS-t0)) s -> $out/$name"
  fi
  exec {lock}>&-
  echo "$(echo "$name" | tr a-z- A-Z_)=$out/$name"
}

components=("$@")
[ ${#components[@]} -eq 0 ] && components=(etcd csi-provisioner csi-attacher csi-resizer csi-snapshotter snapshot-controller snapshot-crds kube-apiserver kube-controller-manager kube-scheduler)
t0=$SECONDS
for c in "${components[@]}"; do
  case "$c" in
    etcd) build_etcd ;;
    csi-provisioner) build_sidecar csi-provisioner provisioner github.com/kubernetes-csi/external-provisioner ;;
    csi-attacher) build_sidecar csi-attacher attacher github.com/kubernetes-csi/external-attacher ;;
    csi-resizer) build_sidecar csi-resizer resizer github.com/kubernetes-csi/external-resizer ;;
    csi-snapshotter|snapshot-controller) build_snapshotter "$c" ;;
    snapshot-crds) build_snapshot_crds ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet) build_kube "$c" ;;
    containerd|containerd-shim-runc-v2|ctr) build_containerd "$c" ;;
    # Resolves (downloads) the Kubernetes wrapper without compiling: network-bound, so it can
    # overlap with the compile of another component.
    prepare-kube) prepare_kube ;;
    *) log "unknown component $c"; exit 2 ;;
  esac
done
[ $((SECONDS-t0)) -gt 5 ] && log "all done in $((SECONDS-t0)) s"
exit 0
