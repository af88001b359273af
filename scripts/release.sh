#!/usr/bin/env bash
# `npm run release -- [--version X.Y.Z] [--registry HOST[:PORT][/PATH]]`: the release artifacts.
#
#   1. the image from the real Dockerfile, built as the image tier builds it (buildah, the
#      stand-in base, scripts/lib/containers.sh), linux/amd64, labelled with the OCI
#      annotations (version, revision, created, source), as localhost/pve-nfs-csi:X.Y.Z;
#   2. the chart: `helm package` with version and appVersion X.Y.Z, and values.yaml's
#      image.repository/tag pinned to <registry>/pve-nfs-csi:X.Y.Z in the packaged copy;
#   3. with --registry: the image pushed to docker://<registry>/pve-nfs-csi:X.Y.Z (buildah
#      push) and the chart to oci://<registry>/charts (helm push). Without it nothing leaves
#      the machine, and the chart names the default ghcr.io/pve-nfs-csi.
#
# The one source of the version is package.json: --version must equal it (a release bumps it,
# Chart.yaml, the Dockerfile's label and CHANGELOG.md together: test/unit/release/versions.test.ts).
#
# Options:
#   --source DIR      build another tree (an older commit's, for the upgrade test) with this
#                     script's steps; its Dockerfile and chart are used as they are
#   --revision SHA    the org.opencontainers.image.revision label (default: git HEAD of the tree)
#   --out DIR         where the chart .tgz, the image digest and release.env go (default
#                     dist/release/X.Y.Z)
#   --reuse           skip the image build when localhost/pve-nfs-csi:X.Y.Z exists with the
#                     same revision label (an old commit's image does not change)
#   --cert-dir DIR    directory with the registry's ca.crt (buildah), default $REGISTRY_CERT_DIR
#   --ca-file FILE    the registry's CA certificate (helm), default $REGISTRY_CA
# Prints the time of each step; the last lines are DIR/release.env (IMAGE=, DIGEST=, CHART=...).
set -euo pipefail
cd "$(dirname "$0")/.."
HERE="$PWD"
source scripts/lib/ensure.sh
source scripts/lib/containers.sh

version="" registry="" src="$HERE" revision="" out="" reuse=0
cert_dir="${REGISTRY_CERT_DIR:-}" ca_file="${REGISTRY_CA:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version="$2"; shift 2 ;;
    --registry) registry="$2"; shift 2 ;;
    --source) src="$(cd "$2" && pwd)"; shift 2 ;;
    --revision) revision="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --reuse) reuse=1; shift ;;
    --cert-dir) cert_dir="$2"; shift 2 ;;
    --ca-file) ca_file="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "release: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "release: $*" >&2; exit 1; }
pkg_version="$(node -p 'require(process.argv[1]).version' "$src/package.json")"
[ -n "$version" ] || version="$pkg_version"
[[ $version =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
  die "--version $version is not a semantic version X.Y.Z[-pre]"
[ "$version" = "$pkg_version" ] ||
  die "--version $version but $src/package.json says $pkg_version: bump package.json, Chart.yaml, the Dockerfile label and CHANGELOG.md first (test/unit/release/versions.test.ts checks they agree)"
chart_src="$src/charts/pve-nfs-csi"
chart_v="$(awk '$1=="version:" {print $2}' "$chart_src/Chart.yaml")"
chart_app="$(awk '$1=="appVersion:" {gsub(/"/,"",$2); print $2}' "$chart_src/Chart.yaml")"
[ "$chart_v" = "$version" ] && [ "$chart_app" = "$version" ] ||
  die "$chart_src/Chart.yaml has version $chart_v, appVersion $chart_app; package.json has $version"
if [ -z "$revision" ]; then
  revision="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)"
  [ -z "$(git -C "$src" status --porcelain 2>/dev/null)" ] || revision="$revision-dirty"
fi
repo="${registry:-ghcr.io/pve-nfs-csi}/pve-nfs-csi"
local_image="localhost/pve-nfs-csi:$version"
out="${out:-$HERE/dist/release/$version}"
mkdir -p "$out"
t0=$SECONDS

# --- 1. the image ---
containers_env
containers_base "$src/Dockerfile"
have_rev="$(podman image inspect --format '{{index .Labels "org.opencontainers.image.revision"}}' "$local_image" 2>/dev/null || true)"
if [ "$reuse" = 1 ] && [ "$have_rev" = "$revision" ]; then
  echo "release: image $local_image of $revision already built" >&2
else
  t=$SECONDS
  created="$(git -C "$src" log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)"
  buildah bud --quiet "${BUILD_FLAGS[@]}" --platform linux/amd64 \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$revision" \
    --label "org.opencontainers.image.created=$created" \
    --label "org.opencontainers.image.source=https://github.com/pve-nfs-csi/pve-nfs-csi" \
    -f "$src/Dockerfile" -t "$local_image" "$src" >/dev/null
  echo "release: built $local_image ($revision) in $((SECONDS-t)) s" >&2
fi
label="$(podman image inspect --format '{{index .Labels "org.opencontainers.image.version"}}' "$local_image")"
[ "$label" = "$version" ] || die "image $local_image is labelled version $label, not $version"

# --- 2. the chart, with the image pinned ---
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp -r "$chart_src" "$stage/pve-nfs-csi"
# Only the top-level image block's two lines; the rest of values.yaml (and its comments, which
# `helm show values` prints to users) stays as written.
awk -v repo="$repo" -v tag="$version" '
  /^[^ #]/ { inimg = ($0 ~ /^image:/) }
  inimg && /^  repository:/ { print "  repository: " repo; seen++; next }
  inimg && /^  tag:/ { print "  tag: \"" tag "\""; seen++; next }
  { print }
  END { if (seen != 2) { print "release: no image.repository/tag in values.yaml" > "/dev/stderr"; exit 1 } }
' "$chart_src/values.yaml" >"$stage/pve-nfs-csi/values.yaml"
ensure_helm
export HELM_CACHE_HOME="$stage/helm/cache" HELM_CONFIG_HOME="$stage/helm/config" HELM_DATA_HOME="$stage/helm/data"
"$HELM" package --version "$version" --app-version "$version" -d "$out" "$stage/pve-nfs-csi" >/dev/null
chart_tgz="$out/pve-nfs-csi-$version.tgz"
pinned="$("$HELM" show values "$chart_tgz" | awk '/^image:/{f=1;next} f&&/^  repository:/{r=$2} f&&/^  tag:/{gsub(/"/,"",$2); print r ":" $2; exit}')"
[ "$pinned" = "$repo:$version" ] || die "the packaged chart's image is $pinned, not $repo:$version"
echo "release: chart $chart_tgz (image $pinned)" >&2

# --- 3. push ---
digest=""
if [ -n "$registry" ]; then
  tls=()
  [ -n "$cert_dir" ] && tls=(--cert-dir "$cert_dir")
  t=$SECONDS
  buildah push --quiet "${tls[@]}" --digestfile "$out/image.digest" "$local_image" "docker://$repo:$version"
  digest="$(cat "$out/image.digest")"
  echo "release: pushed $repo:$version ($digest) in $((SECONDS-t)) s" >&2
  t=$SECONDS
  ca=()
  [ -n "$ca_file" ] && ca=(--ca-file "$ca_file")
  "$HELM" push "${ca[@]}" "$chart_tgz" "oci://${registry}/charts" >"$stage/push.log" 2>&1 ||
    { cat "$stage/push.log" >&2; die "helm push failed"; }
  chart_digest="$(awk '/^Digest:/ {print $2}' "$stage/push.log")"
  echo "release: pushed oci://$registry/charts/pve-nfs-csi:$version ($chart_digest) in $((SECONDS-t)) s" >&2
fi
cat >"$out/release.env" <<ENV
VERSION=$version
REVISION=$revision
IMAGE=$repo:$version
DIGEST=$digest
CHART=$chart_tgz
CHART_REF=oci://${registry:-ghcr.io/pve-nfs-csi}/charts/pve-nfs-csi
ENV
echo "release: $version done in $((SECONDS-t0)) s" >&2
cat "$out/release.env"
