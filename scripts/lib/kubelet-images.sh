#!/usr/bin/env bash
# The images a real kubelet node runs in the kubelet tier, all built here (nothing can be pulled):
#
#   pause       the pod sandbox (test/kubelet/images/pause), named as containerd's default
#               sandbox image, so containerd needs no setting for it
#   registrar   node-driver-registrar (test/kubelet/images/registrar: the upstream module is
#               refused by the module proxy, so this is our implementation of its contract),
#               named as the chart pins the sidecar (sidecars.nodeDriverRegistrar.image)
#   workload    the test workload (test/kubelet/images/workload: write/verify/hold)
#   driver      the project's image from the real Dockerfile (as scripts/image.sh builds it),
#               named as the chart renders it (image.repository:appVersion)
#
# pause, registrar and workload are static Go binaries (CGO_ENABLED=0) on an empty base. Each
# image is written once as an OCI archive, cached outside the checkout and keyed by what it is
# built from (sources, go.sum, Go version; for the driver, the files its Dockerfile copies and
# the base image's recipe):
#   ~/.cache/pve-nfs-csi/kubelet-images/<name>-<key>.oci.tar   (+ <name>-<key>/<binary>)
# The archive's index names the image by its reference (org.opencontainers.image.ref.name), so
# `ctr -n k8s.io images import FILE` and `podman load -i FILE` give it that name.
#
# Usage: scripts/lib/kubelet-images.sh [pause|registrar|workload|driver ...]  (default: all four)
# Prints on stdout, per image, NAME=<archive> and NAME_REF=<image reference in it>, and for the
# three Go images NAME_BIN=<static binary> (NAME is PAUSE, REGISTRAR, WORKLOAD or DRIVER); and
# CONTAINERS_STORAGE_CONF / CONTAINERS_CONF / CONTAINERS_REGISTRIES_CONF, the podman settings the
# images were built with. Build logs and times go to stderr. Warm: about a second.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/ensure.sh
source scripts/lib/containers.sh

SRC=test/kubelet/images
OUT="$CACHE/kubelet-images"
# Bump when how an image is made changes in a way its sources do not show.
RECIPE=r1
PAUSE_REF=registry.k8s.io/pause:3.10.2
export GOTOOLCHAIN=local CGO_ENABLED=0

log() { echo "kubelet-images: $*" >&2; }

# chart_refs: the registrar's repository and tag, and the driver image's repository and tag, as
# the chart renders them (sidecars.nodeDriverRegistrar.image; image.repository and image.tag,
# else the chart's appVersion), one per line.
chart_refs() {
  node --input-type=module -e '
    import { readFileSync } from "node:fs"; import YAML from "yaml";
    const v = YAML.parse(readFileSync("charts/pve-nfs-csi/values.yaml", "utf8"));
    const c = YAML.parse(readFileSync("charts/pve-nfs-csi/Chart.yaml", "utf8"));
    const r = v?.sidecars?.nodeDriverRegistrar?.image;
    const out = [r?.repository, r?.tag, v?.image?.repository, v?.image?.tag || c?.appVersion];
    if (out.some((x) => !x)) { console.error("chart: an image repository or tag is missing"); process.exit(1); }
    console.log(out.join("\n"));'
}

# content_key PATH...: a short hash of the tracked and new (not ignored) files under PATH...,
# their names and contents, with the recipe and the Go version.
content_key() {
  {
    echo "$RECIPE $(go env GOVERSION)"
    git ls-files -z -co --exclude-standard -- "$@" | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
}

# emit NAME ARCHIVE REF [BIN]
emit() {
  echo "$1=$2"
  echo "$1_REF=$3"
  [ -z "${4:-}" ] || echo "$1_BIN=$4"
}

# archive NAME KEY REF: builds the image REF from the context $ctx unless NAME-KEY.oci.tar exists.
archive() {
  local name="$1" key="$2" ref="$3" out="$OUT/$1-$2.oci.tar"
  [ -f "$out" ] && return 0
  buildah bud --quiet --pull=never --isolation=chroot --layers --build-arg "VERSION=${ref##*:}" \
    -f "$ctx/Containerfile" -t "$ref" "$ctx" >/dev/null
  rm -f "$out.tmp"
  buildah push --quiet "$ref" "oci-archive:$out.tmp:$ref" >/dev/null
  mv "$out.tmp" "$out"
  # Archives of earlier sources are of no further use once a day old.
  find "$OUT" -maxdepth 1 -name "$name-*.oci.tar" ! -name "${out##*/}" -mtime +1 -delete
}

# go_image NAME PACKAGE BINARY REF_WITHOUT_TAG|REF [VERSION]
go_image() {
  local name="$1" pkg="$2" bin="$3" ref="$4" version="${5:-}"
  # A pinned reference (the registrar's tag) is part of the key: a new pin is a new archive.
  local key; key="$({ content_key "$SRC/go.mod" "$SRC/go.sum" "$SRC/$pkg"; echo "$ref"; } | sha256sum | cut -c1-16)"
  [ -n "$version" ] || version="$key"
  [[ $ref == *:* ]] || ref="$ref:$key"
  local dir="$OUT/$name-$key" out="$OUT/$name-$key.oci.tar" t=$SECONDS lock
  exec {lock}>"$OUT/.$name.lock"; flock "$lock"
  if [ ! -f "$out" ]; then
    if [ ! -x "$dir/$bin" ]; then
      log "building $name ($SRC/$pkg)"
      mkdir -p "$dir"
      (cd "$SRC" && nice -n 10 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$dir/$bin.tmp" "./$pkg" >&2)
      mv "$dir/$bin.tmp" "$dir/$bin"
    fi
    ctx="$(mktemp -d)"
    cp "$dir/$bin" "$SRC/$pkg/Containerfile" "$ctx/"
    archive "$name" "$key" "$ref"
    rm -rf "$ctx"
    log "$name: $ref in $((SECONDS - t)) s -> $out"
  fi
  exec {lock}>&-
  emit "$(echo "$name" | tr '[:lower:]' '[:upper:]')" "$out" "$ref" "$dir/$bin"
}

# driver_image: the real Dockerfile, with the flags the image tier builds it with.
driver_image() {
  local ref sources key out t=$SECONDS lock
  ref="${CHART[2]}:${CHART[3]}"
  # What the Dockerfile copies from the context (COPY lines without --from).
  mapfile -t sources < <(awk 'toupper($1)=="COPY" && $2 !~ /^--from/ {for (i = 2; i < NF; i++) print $i}' Dockerfile | sort -u)
  key="$(content_key Dockerfile "${sources[@]}")-n$NODE_VERSION-$BASE_RECIPE"
  out="$OUT/driver-$key.oci.tar"
  exec {lock}>"$OUT/.driver.lock"; flock "$lock"
  if [ ! -f "$out" ]; then
    log "building the driver image $ref from Dockerfile"
    containers_base Dockerfile
    buildah bud --quiet "${BUILD_FLAGS[@]}" -f Dockerfile -t "$ref" . >/dev/null
    rm -f "$out.tmp"
    buildah push --quiet "$ref" "oci-archive:$out.tmp:$ref" >/dev/null
    mv "$out.tmp" "$out"
    find "$OUT" -maxdepth 1 -name 'driver-*.oci.tar' ! -name "${out##*/}" -mtime +1 -delete
    log "driver: $ref in $((SECONDS - t)) s -> $out"
  fi
  exec {lock}>&-
  emit DRIVER "$out" "$ref"
}

images=("$@")
[ ${#images[@]} -gt 0 ] || images=(pause registrar workload driver)
ensure_node_modules
containers_env
mkdir -p "$OUT"
mapfile -t CHART < <(chart_refs)
[ ${#CHART[@]} = 4 ] || exit 1
for image in "${images[@]}"; do
  case "$image" in
    pause) go_image pause pause pause "$PAUSE_REF" ;;
    registrar)
      go_image registrar registrar node-driver-registrar "${CHART[0]}:${CHART[1]}" "${CHART[1]}"
      ;;
    workload) go_image workload workload workload localhost/pve-nfs-csi-workload ;;
    driver) driver_image ;;
    *) log "unknown image $image (pause, registrar, workload, driver)"; exit 2 ;;
  esac
done
echo "CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF"
echo "CONTAINERS_CONF=$CONTAINERS_CONF"
echo "CONTAINERS_REGISTRIES_CONF=$CONTAINERS_REGISTRIES_CONF"
